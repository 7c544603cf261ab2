"""common/logging.py in a fresh interpreter each time: it configures the process's logging for good."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What a component logs: a stdlib line with fields, a library's (uvicorn's) line inside a request's
# context, a line about one instance through structlog, a line below the level, an exception.
SCRIPT = """
import logging, sys
from structlog.contextvars import bound_contextvars
from common.logging import instance_log, setup_logging

log = setup_logging("bbs", "info", sys.argv[1] if sys.argv[1] != "-" else None)
logging.getLogger("bbs.service").info("cell removed", extra={"data": {"cell_id": "c1", "instances": 3}})
with bound_contextvars(request_id="rid-1"):
    logging.getLogger("uvicorn.error").warning("slow client")
instance_log("rep.process", "web", 2, "cell-1").info("instance started", pid=42)
log.debug("not at info")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("failed")
"""


def run(log_format: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, log_format], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stderr.splitlines()


@pytest.mark.parametrize("log_format", ["json", "-"])  # "-": no format given, stderr is a pipe: json
def test_json_lines_parse_and_carry_the_component_the_fields_and_the_context(log_format: str) -> None:
    lines = [json.loads(line) for line in run(log_format) if line.startswith("{")]
    by_msg = {line["msg"]: line for line in lines}
    assert set(by_msg) == {"cell removed", "slow client", "instance started", "failed"}, lines
    removed = by_msg["cell removed"]
    assert {k: removed[k] for k in ("level", "component", "logger", "cell_id", "instances")} == {
        "level": "info", "component": "bbs", "logger": "bbs.service", "cell_id": "c1", "instances": 3}
    assert isinstance(removed["ts"], float)
    slow = by_msg["slow client"]
    assert (slow["request_id"], slow["logger"]) == ("rid-1", "uvicorn.error")
    started = by_msg["instance started"]
    assert {k: started[k] for k in ("process_guid", "index", "cell_id", "pid", "component")} == {
        "process_guid": "web", "index": 2, "cell_id": "cell-1", "pid": 42, "component": "bbs"}
    assert "request_id" not in started  # the request's context ended with it
    assert by_msg["failed"]["level"] == "error" and "ZeroDivisionError" in by_msg["failed"]["exc"]


def test_console_lines_are_for_people() -> None:
    lines = run("console")
    text = "\n".join(lines)
    assert not any(line.startswith("{") for line in lines), text
    removed = next(line for line in lines if "cell removed" in line)
    assert "info" in removed and "cell_id=c1" in removed and "instances=3" in removed, removed
    started = next(line for line in lines if "instance started" in line)
    assert "process_guid=web" in started and "index=2" in started, started
    assert "ZeroDivisionError" in text and "not at info" not in text
