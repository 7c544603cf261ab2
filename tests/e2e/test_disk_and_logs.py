"""End to end: disk_mb enforced, output logs capped, a cell's capacity from the machine.

The instance directory is found through the rep: the pid its state reports, and that process's working
directory (/proc/<pid>/cwd), wherever the rep keeps instance directories.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest

from common.procutil import app_python
from rep.log_records import parse

from .conftest import APP_SOURCE, Unmet, app_processes, brief, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e]

LOG_CAP_MB = 1
MIB = 1024 * 1024
# One cluster per transport for the module: every test has guids of its own and kills or restarts
# nothing. Crashes wait out a back-off from the first (the disk test reads the CRASHED record); output
# logs are capped at 1 MB; disk usage is measured twice a second (the poll: a filesystem per instance,
# where the host allows one, is tests/e2e/test_disk_quota.py's).
CLUSTER = {
    "cells": 2, "zones": 1,
    "bbs_args": ["--immediate-restarts", "1"],
    "rep_args": ["--log-cap-mb", str(LOG_CAP_MB), "--disk-check-interval", "0.5", "--disk-quota", "poll"],
}

APP_PYTHON = app_python()  # one every app user may run
FLOOD_MB = 50
ANSWERED_AT_FLOOD_POINTS = 3  # distinct flood lines last in the log when /state answered, the last excepted

# Serves $PORT; GET /flood writes $FLOOD_MB MB to stdout in numbered 1 KiB lines (how far the flood got shows
# at the end of its log), then "flood done", then answers.
FLOODER = r"""
import http.server, os, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/flood":
            for number in range(int(os.environ["FLOOD_MB"]) * 1024):
                sys.stdout.buffer.write(b"%09d " % number + b"x" * 1013 + b"\n")
            sys.stdout.buffer.write(b"flood done\n")
            sys.stdout.flush()
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

# Serves $PORT and writes $FILL_MB MB into a file in its directory.
FILLER = r"""
import http.server, os, threading
def fill():
    with open("fill", "wb") as f:
        for _ in range(int(os.environ["FILL_MB"])):
            f.write(b"\xff" * (1 << 20))
            f.flush()
threading.Thread(target=fill).start()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
http.server.ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""


def instance_dir(c, actual: dict) -> Path:
    """The instance's directory: the working directory of the process its rep reports for it."""
    held = {lrp["instance_guid"]: lrp for lrp in c.rep_state(actual["cell_id"])["lrps"]}
    pid = held.get(actual["instance_guid"], {}).get("pid")
    assert pid, (
        f"expected the rep of {actual['cell_id']} to report the pid of {actual['instance_guid']}, saw {held}"
    )
    return Path(os.readlink(f"/proc/{pid}/cwd"))


def flood_line(directory: Path) -> int | None:
    """The number of the last whole numbered line (record) of the flood in output.log (None before the first
    one, or just after a rotation): how far the rep's pump has got."""
    try:
        with open(directory / "output.log", "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 2048))
            tail = log.read()
    except FileNotFoundError:
        return None
    numbered = [r.text for r in parse(tail) if r.text[:9].isdigit()]  # whole records only
    return int(numbered[-1][:9]) if numbered else None


def log_sizes(directory: Path) -> tuple[int, int]:
    """Sizes of output.log.1 and output.log (0 when absent); each is at most half the cap at any moment."""
    sizes = []
    for name in ("output.log.1", "output.log"):
        try:
            sizes.append((directory / name).stat().st_size)
        except FileNotFoundError:
            sizes.append(0)
    return sizes[0], sizes[1]


class StatePoller:
    """Asks a rep for its state back to back in a thread, over one kept-alive connection, recording when
    each answer began and ended, and the instance's log sizes and flood line between answers."""

    def __init__(self, c, cell_id: str, directory: Path) -> None:
        self.url = f"{c.reps[cell_id].url}/state"
        self.cell_id = cell_id
        self.directory = directory
        self.client = httpx.Client(verify=c.lc.verify, timeout=10.0)
        self.answers: list[tuple[float, float, int]] = []
        self.log_totals: list[int] = []
        self.flood_lines: list[int | None] = []  # flood_line() after each answer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="state-poller")

    def __enter__(self) -> StatePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                status = self.client.get(self.url, params={"cells": self.cell_id}).status_code
            except httpx.HTTPError:
                status = 0
            self.answers.append((began, time.monotonic(), status))
            self.log_totals.append(sum(log_sizes(self.directory)))
            self.flood_lines.append(flood_line(self.directory))

    def during(self, start: float, end: float) -> list[tuple[float, float, int]]:
        return [a for a in self.answers if a[0] <= end and a[1] >= start]


@pytest.mark.timeout(180)
def test_a_flood_of_output_is_capped_and_the_rep_stays_responsive(shared_cluster):
    c = shared_cluster
    guid = c.guid("flooder")
    c.bbs.desire(guid, 1, command=[APP_PYTHON, "-c", FLOODER], env={"FLOOD_MB": str(FLOOD_MB)})
    [instance] = wait_all_running(c.bbs, guid, 1, answer=False).values()
    directory = instance_dir(c, instance)

    with StatePoller(c, instance["cell_id"], directory) as poller:
        wait_for(lambda: poller.answers, 30.0, "a first answer of the rep's /state")
        started = time.monotonic()
        r = httpx.get(f"http://{instance['address']}/flood", timeout=120.0)
        assert r.status_code == 200, f"expected the app to flood and answer, saw {r.status_code}"
        wait_for(lambda: expect((directory / "output.log").read_bytes().endswith(b"flood done\n"),
                                f"log sizes {log_sizes(directory)}"),
                 60.0, "the flood's last line at the end of output.log")
        ended = time.monotonic()

    during = poller.during(started, ended)
    assert during and all(status == 200 for *_, status in during), f"expected /state to answer, saw {during}"
    # Asked back to back, the rep answered at many points of the flood's progress: its event loop took
    # turns between the pump's reads, never held by them until the flood was over.
    amid = {n for n in poller.flood_lines if n is not None and n < FLOOD_MB * 1024 - 1}
    assert len(amid) >= ANSWERED_AT_FLOOD_POINTS, (
        f"expected /state answered at {ANSWERED_AT_FLOOD_POINTS} points of the flood at least, saw it at "
        f"lines {sorted(amid)} of {FLOOD_MB * 1024}")
    cap = LOG_CAP_MB * MIB
    rotated, current = log_sizes(directory)
    assert rotated + current <= cap and max(poller.log_totals) <= cap, (
        f"expected output.log + output.log.1 within the {cap} byte cap, saw {rotated} + {current} "
        f"(at most {max(poller.log_totals)} while flooding)")
    # Rotated between two records: the older half kept as output.log.1, less than one record.
    assert cap // 2 - 2048 < rotated <= cap // 2, (
        f"expected the older half kept as output.log.1, saw {rotated}")

    [still] = wait_all_running(c.bbs, guid, 1, answer=False).values()
    assert still["instance_guid"] == instance["instance_guid"] and still["crash_count"] == 0, (
        f"expected the flooder to keep running as it was, saw {brief([still])}")
    assert httpx.get(f"http://{still['address']}/", timeout=5.0).text == "ok"


@pytest.mark.timeout(180)
def test_an_app_writing_past_its_disk_mb_is_stopped_and_shown_crashed(shared_cluster):
    c = shared_cluster
    guid = c.guid("filler")
    c.bbs.desire(guid, 1, command=[APP_PYTHON, "-c", FILLER], env={"FILL_MB": "40"}, disk_mb=16,
                 health_check={"type": "process"})

    def crashed() -> dict:
        r = c.cli("instances", guid, "--json")
        if r.code != 0:
            raise Unmet(f"`vendue instances {guid} --json` exited {r.code}: {r.output}")
        rows = json.loads(r.stdout)
        rows = rows["items"] if isinstance(rows, dict) else rows
        if len(rows) != 1 or rows[0]["state"] != "CRASHED":
            raise Unmet(brief(rows))
        return rows[0]

    row = wait_for(crashed, 60.0, f"{guid} CRASHED in `vendue instances --json`")
    reason = row["crash_reason"]
    used = reason.removeprefix("disk quota exceeded (").removesuffix(" MB used of 16 MB)")
    assert used.isdigit() and 16 < int(used) <= 41, f"expected the disk quota as the reason, saw {reason!r}"
    table = c.cli("instances", guid)
    assert table.code == 0 and "disk quota exceeded" in table.stdout, (
        f"expected the reason in `vendue instances`, saw:\n{table.output}")
    wait_for(lambda: expect(not app_processes(guid), app_processes(guid)), 10.0, f"no process of {guid} left")


@pytest.mark.timeout(120)
def test_a_tasks_result_is_still_its_last_4_kib_past_the_log_cap(shared_cluster):
    c = shared_cluster
    guid = c.guid("long-task")
    script = "import sys\nfor i in range(300_000): print(f'{i:09d}')\nprint('tail-ok')"
    c.bbs.create_task(guid, [APP_PYTHON, "-c", script])

    def completed() -> dict:
        task = c.bbs.task(guid)
        return expect(task["state"] in ("COMPLETED", "RESOLVING") and task, f"{task['state']}")

    task = wait_for(completed, 60.0, f"task {guid} completed")
    written = "".join(f"{i:09d}\n" for i in range(299_000, 300_000)) + "tail-ok\n"  # 3 MB, of which the end
    assert (task["failed"], task["exit_status"]) == (False, 0), task
    assert task["result"] == written[-4096:], f"expected the last 4 KiB, saw ...{task['result'][-100:]!r}"


def mem_total_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["http"])  # what a cell offers does not depend on the transport
def test_a_rep_given_no_sizes_offers_the_machine(make_cluster, transport):
    c = make_cluster(cells=1, zones=1, cell_memory_mb=None, cell_disk_mb=None,
                     rep_args=["--disk-reserve-mb", "2048"])
    guid = c.guid("where")
    c.bbs.desire(guid, 1, command=[APP_PYTHON, "-c", APP_SOURCE], memory_mb=64, disk_mb=64)
    [instance] = wait_all_running(c.bbs, guid, 1).values()
    fs = os.statvfs(instance_dir(c, instance).parent)  # the cell's: the instance's may be its own

    [cell] = c.bbs.cells()
    expected = {"memory_mb": mem_total_mb(), "disk_mb": fs.f_blocks * fs.f_frsize // MIB - 2048}
    assert {k: cell["total"][k] for k in expected} == expected, (
        f"expected the cell to offer MemTotal and its instance filesystem's size less 2048 MB, saw "
        f"{cell['total']}"
    )
