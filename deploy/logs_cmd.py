"""`vendue logs APP [INDEX]` and `vendue logs --task GUID`: an app's (or a task's) output through the BBS
(GET /v1/logs/{process_guid}, /v1/tasks/{task_guid}/logs: docs/logs.md).

Every line is what an app printed: on the terminal its control sequences are shown as escapes, never
obeyed (deploy/terminal_text.py); `--json` gives the BBS's lines, time in RFC 3339 UTC.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, fail
from .client_cmd import AsJson, Connection, bbs_command, connect
from .terminal_text import echo, plain

MAX_RECENT = 100_000
FOLLOW_GIVE_UP_S = 30.0  # a BBS (every replica) that gives no line this long while following is gone
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
STREAM_TAGS = {"stdout": "OUT", "stderr": "ERR"}


def since_ns(text: str, now: float | None = None) -> int:
    """`--since`: a duration ago (30s, 10m, 2h, 1d) or a moment (RFC 3339: 2026-11-29T05:00:00Z), as Unix
    nanoseconds. ValueError names what is wrong."""
    now = time.time() if now is None else now
    ago = _AGO.match(text.strip())
    if ago is not None:
        return max(0, int((now - float(ago.group(1)) * _UNITS[ago.group(2)]) * 1e9))
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is neither a duration (30s, 10m, 2h, 1d) nor an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone (add Z for UTC)")
    return max(0, int(moment.timestamp() * 1e9))


def render(line: dict[str, Any]) -> str:
    """One readable line: local time, which instance (index@cell) or task, the stream, the text, with
    every control character shown as its escape."""
    ns = int(line.get("ns", 0))
    at = datetime.fromtimestamp(ns / 1e9).astimezone().strftime("%H:%M:%S.%f")[:-3]
    who = f"{line['index']}@{line.get('cell', '')}" if "index" in line else f"task@{line.get('cell', '')}"
    tag = STREAM_TAGS.get(str(line.get("stream", "")), "OUT")
    return plain(f"{at} [{who}] {tag} {line.get('text', '')}", lines=False)


def as_json(line: dict[str, Any]) -> str:
    """The BBS's line as JSON (time in RFC 3339 UTC; every control character escaped by the encoder)."""
    if "time" not in line and "ns" in line:
        ns = int(line["ns"])
        line = {"time": datetime.fromtimestamp(ns // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
                + f".{ns % 1_000_000_000:09d}Z", **line}
    return json.dumps(line, ensure_ascii=True)


def follow_through_failures(client: Any, path: str, params: dict[str, str], follow: bool,
                            give_up_s: float = FOLLOW_GIVE_UP_S,
                            task: bool = False) -> Iterator[dict[str, Any]]:
    """The BBS's lines; following, a stream that breaks (the BBS restarted, or another replica takes over)
    is asked for again from the last line's time (`since`), so nothing is shown twice; given up after
    `give_up_s` without a line, and at once when the first connection fails. A task's follow ends when
    its stream does (the task ended)."""
    from common.retry import EVENT_STREAM

    from .bbs_client import BBSUnreachable

    delays = EVENT_STREAM.delays()
    last_ns: int | None = None
    quiet_since = time.monotonic()
    while True:
        asked = dict(params)
        if last_ns is not None:
            asked.update(since=str(last_ns), recent=str(MAX_RECENT))
        try:
            for line in client.logs(path, asked, follow):
                if "ns" in line:
                    last_ns = max(last_ns or 0, int(line["ns"]))
                quiet_since = time.monotonic()
                delays.reset()
                yield line
            if not follow or task:
                return
            why = "the BBS closed the log stream"
        except BBSUnreachable as exc:
            if not follow or last_ns is None:
                raise
            why = str(exc)
        if time.monotonic() - quiet_since > give_up_s:
            raise BBSUnreachable(f"{why}; no line for {give_up_s:g}s, gave up")
        echo(f"reconnecting: {why}", err=True)
        time.sleep(next(delays))


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def logs(
    app_name: Annotated[str | None, typer.Argument(metavar="APP", help="The app's process guid.",
                                                   show_default=False)] = None,
    index: Annotated[int | None, typer.Argument(metavar="[INDEX]", help="Only this instance.",
                                                show_default=False)] = None,
    task: Annotated[str | None, typer.Option("--task", metavar="GUID",
                                             help="A task's output instead.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Go on with what is printed (Ctrl-C to "
                                                                "stop).")] = False,
    recent: Annotated[int | None, typer.Option("--recent", metavar="N", help="The last N lines (default "
                                                                             "100; 10 with -f).")] = None,
    since: Annotated[str | None, typer.Option("--since", metavar="WHEN", help="Only lines after: 10m, 2h, "
                                              "or an RFC 3339 time.")] = None,
    stderr: Annotated[bool, typer.Option("--stderr", help="Only stderr.")] = False,
    stdout: Annotated[bool, typer.Option("--stdout", help="Only stdout.")] = False,
    connection: Connection = Connection(),
    json_lines: AsJson = False,
) -> None:
    """Show an app's output (every instance's, merged in time order), or a task's.

    Each line: time, index@cell, OUT or ERR, the text. A crashed instance's lines stay readable until
    its directory on the cell is removed (docs/logs.md)."""
    if (app_name is None) == (task is None):
        fail("logs: name an APP, or --task GUID (not both)", USAGE_ERROR)
    if task is not None and index is not None:
        fail("INDEX: a task has no instances", USAGE_ERROR)
    if index is not None and index < 0:
        fail(f"INDEX: must be 0 or more, got {index}", USAGE_ERROR)
    if recent is not None and not 0 <= recent <= MAX_RECENT:
        fail(f"--recent: must be between 0 and {MAX_RECENT}, got {recent}", USAGE_ERROR)
    if stderr and stdout:
        fail("--stderr, --stdout: choose one (neither: both streams)", USAGE_ERROR)
    params: dict[str, str] = {}
    if since is not None:
        try:
            params["since"] = str(since_ns(since))
        except ValueError as exc:
            fail(f"--since: {exc}", USAGE_ERROR)
    if recent is not None:
        params["recent"] = str(recent)
    if index is not None:
        params["index"] = str(index)
    if stderr or stdout:
        params["stream"] = "stderr" if stderr else "stdout"
    if follow:
        params["follow"] = "1"
    path = f"/v1/tasks/{task}/logs" if task is not None else f"/v1/logs/{app_name}"

    from .bbs_client import NotFound

    with connect(connection) as client:
        try:
            for line in follow_through_failures(client, path, params, follow, task=task is not None):
                if "end" in line:
                    fail(f"the BBS ended the log stream: {plain(line['end'], lines=False)}")
                sys.stdout.write((as_json(line) if json_lines else render(line)) + "\n")
                sys.stdout.flush()
        except NotFound:
            fail(f"no task {task!r}" if task is not None else f"no app named {app_name!r}")
        except KeyboardInterrupt:
            return
        except BrokenPipeError:  # `vendue logs APP | head`
            return



