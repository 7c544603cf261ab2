"""`vendue bbs` as a real process: ready file, HTTP, server-sent events, kill -9 and restart on the
same database (SQLite file or PostgreSQL) with the state intact, and a graceful SIGTERM while an
event stream is open. The BBS serves HTTPS with a certificate from a CA in the test's directory, and the
tests call it as an admin."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.tls import INSECURE_WARNING
from tests.support.bbs_process import ROOT, BBSProcess
from tests.support.polling import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]


def test_state_survives_kill_9_and_restart(
    tmp_path: Path, database_url: str, processes: list[BBSProcess]
) -> None:
    first = BBSProcess(tmp_path, "1", database_url)
    processes.append(first)
    with first.client(timeout=10) as http:
        assert http.get("/ping").json() == {"ok": True, "ready": True, "insecure": False}
        with http.stream("GET", "/v1/events") as events:
            lines = events.iter_lines()
            assert next(lines) == ": connected"
            created = http.post("/v1/desired_lrps", json={"process_guid": "web", "instances": 3,
                                                          "command": ["true"]})
            assert created.status_code == 201, created.text
            seen = _event_types(lines, want=4)
        assert seen == [
            "desired_lrp_created",
            "actual_lrp_created",
            "actual_lrp_created",
            "actual_lrp_created",
        ]
        task = http.post("/v1/tasks", json={"task_guid": "t1", "command": ["true"]})
        assert task.status_code == 201
        before = http.get("/v1/actual_lrps").json()["items"]

    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=10)

    second = BBSProcess(tmp_path, "2", database_url)
    processes.append(second)
    with second.client(timeout=10) as http:
        assert http.get("/v1/desired_lrps/web").json()["instances"] == 3
        after = http.get("/v1/actual_lrps").json()["items"]
        assert [(a["index"], a["state"]) for a in after] == [(a["index"], a["state"]) for a in before]
        assert http.get("/v1/tasks/t1").json()["state"] == "PENDING"


def test_sigterm_shuts_down_gracefully_with_an_open_event_stream(
    tmp_path: Path, processes: list[BBSProcess]
) -> None:
    bbs = BBSProcess(tmp_path, "1", tls=False)
    processes.append(bbs)
    with bbs.client(timeout=10) as http, http.stream("GET", "/v1/events") as events:
        lines = events.iter_lines()
        assert next(lines) == ": connected"
        bbs.proc.send_signal(signal.SIGTERM)
        assert bbs.proc.wait(timeout=15) == 0
    log = (tmp_path / "bbs-1.log").read_text().splitlines()
    messages = [json.loads(line)["msg"] for line in log if line.startswith("{")]
    assert "serving" in messages and "stopped" in messages
    assert INSECURE_WARNING in messages  # no TLS files: plain HTTP on loopback, and loud about it


def test_plain_http_beyond_loopback_is_refused_unless_insecure(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "deploy.cli",
        "bbs",
        "--listen",
        "0.0.0.0",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path),
    ]
    refused = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.splitlines() == [
        "error: --tls-cert (tls_cert): refusing to serve plain HTTP on 0.0.0.0 without TLS: give --tls-cert, "
        "--tls-key and --tls-ca (vendue certs issue), or --insecure to run without authentication"
    ]
    assert not (tmp_path / "bbs.db").exists()  # refused before the database was opened


def _event_types(lines: Iterator[str], want: int, timeout_s: float = 10) -> list[str]:
    """The types of the next `want` events on the stream (a line at each look; a look waits for its line)."""
    seen: list[str] = []

    def enough() -> bool:
        line = next(lines, None)
        if line is None:
            raise AssertionError(f"the event stream ended after {seen}")
        if line.startswith("event: ") and line != "event: convergence_completed":  # one per pass, any time
            seen.append(line.removeprefix("event: "))
        return len(seen) >= want

    wait_for(enough, timeout_s, f"{want} events", lambda: seen, interval=0)
    return seen


def test_a_request_id_is_returned_and_on_the_lines_the_request_logs(
    tmp_path: Path, processes: list[BBSProcess]
) -> None:
    bbs = BBSProcess(tmp_path, "1")
    processes.append(bbs)
    with bbs.client(timeout=10) as http:
        created = http.post("/v1/tokens", json={"role": "reader", "name": "ci"},
                            headers={"X-Request-ID": "e2e-request-1"})
        assert created.status_code == 201, created.text
        assert created.headers["x-request-id"] == "e2e-request-1"
        made = http.get("/v1/tokens").headers["x-request-id"]
        assert len(made) == 16 and made != "e2e-request-1"  # none sent: one made

    def log_lines() -> list[dict[str, Any]]:
        return [json.loads(line) for line in (tmp_path / "bbs-1.log").read_text().splitlines()
                if line.startswith("{")]

    # The BBS writes its log line as it answers; read until it is there.
    logged = wait_for(lambda: [line for line in log_lines() if line["msg"] == "token created"], 10.0,
                      "a 'token created' line in the BBS's log", log_lines)
    assert len(logged) == 1, f"expected one 'token created' line in the BBS's log; saw {log_lines()}"
    line = logged[0]
    assert (line["request_id"], line["component"], line["name"]) == ("e2e-request-1", "bbs", "ci"), line
