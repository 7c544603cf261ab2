"""The log lines of every component, through structlog: configured once here, for our code and libraries.

Our modules log with the stdlib (`logging.getLogger(__name__)`, `extra={"data": {...}}` for fields) or
with structlog (`instance_log`, for lines about one instance with its process_guid/index/cell_id bound);
uvicorn, httpx and the rest log with the stdlib. All of it goes through one handler on the root logger
whose structlog formatter adds the context: the component, the request id of the HTTP request being
answered (common/request_id.py), anything bound with `structlog.contextvars`, and the record's fields.

Two renderings: `json` — one object per line, `{"ts", "level", "component", "logger", "msg", ...fields}`,
what the e2e tests and log shippers read — and `console`, the same fields aligned for a person at a
terminal. A component's `--log-format` (its settings' log_format, VENDUE_LOG_FORMAT) picks one; by default
a terminal gets `console` and a file or pipe (`vendue up`'s <data-dir>/logs/) gets `json`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import MutableMapping
from typing import Any, Literal, TextIO

import structlog

LogFormat = Literal["json", "console"]
Event = MutableMapping[str, Any]


def _timestamp(_logger: Any, _name: str, event: Event) -> Event:
    event["ts"] = round(time.time(), 3)
    return event


def _component(component: str) -> Any:
    def add(_logger: Any, _name: str, event: Event) -> Event:
        event["component"] = component
        return event

    return add


def _record_data(_logger: Any, _name: str, event: Event) -> Event:
    """A stdlib record's `extra={"data": {...}}` fields, as fields of the line."""
    record = event.get("_record")
    data = getattr(record, "data", None)
    if isinstance(data, dict):
        for key, value in data.items():
            event.setdefault(key, value)
    return event


def _exc_as_text(_logger: Any, _name: str, event: Event) -> Event:
    # format_exc_info puts the traceback under "exception"; our lines have always called it "exc".
    if "exception" in event:
        event["exc"] = event.pop("exception")
    return event


def _clock_time(_logger: Any, _name: str, event: Event) -> Event:
    """For people: the local time of day to the millisecond instead of seconds since the epoch."""
    ts = event["ts"]
    event["ts"] = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"
    return event


def _renderer(log_format: str, terminal: bool) -> list[Any]:
    if log_format == "json":
        return [structlog.processors.format_exc_info, _exc_as_text, structlog.processors.EventRenamer("msg"),
                structlog.processors.JSONRenderer(default=str)]
    # Plain tracebacks: rich's would print every frame's local variables (keys, tokens) into the log.
    return [_clock_time, structlog.dev.ConsoleRenderer(colors=terminal, timestamp_key="ts",
                                                       pad_event_to=28,
                                                       exception_formatter=structlog.dev.plain_traceback)]


def setup_logging(component: str, level: str = "info", log_format: LogFormat | None = None,
                  stream: TextIO | None = None) -> logging.Logger:
    """Route every log line of this process (root logger, uvicorn's, structlog's) to `stream` (stderr),
    rendered as `log_format` (None: console on a terminal, json otherwise). Returns the component's stdlib
    logger."""
    stream = stream or sys.stderr
    if log_format is None:
        log_format = "console" if stream.isatty() else "json"
    context = [
        structlog.contextvars.merge_contextvars,
        _component(component),
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _timestamp,
    ]
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*context, _record_data],  # stdlib records
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    *_renderer(log_format, stream.isatty())],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = []
        lg.propagate = True
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    structlog.configure(
        # filter_by_level first: a line below the level costs one isEnabledFor, nothing rendered or bound.
        processors=[structlog.stdlib.filter_by_level, *context,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    return logging.getLogger(component)


def instance_log(name: str, process_guid: str, index: int | None = None, cell_id: str | None = None,
                 **context: Any) -> Any:
    """A structlog logger for lines about one instance (or task: index None), its identity bound. Binding
    copies a small dict: make one where a line is about to be written, never per instance in a loop that
    usually logs nothing (check `logging.getLogger(name).isEnabledFor(...)` first there)."""
    bound = {"process_guid": process_guid, "index": index, "cell_id": cell_id, **context}
    return structlog.get_logger(name).bind(**{k: v for k, v in bound.items() if v is not None})
