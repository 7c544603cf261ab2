"""End to end: instances' output through the BBS (`vendue logs`), over TLS, against real processes.

`logs -f` of an app of four instances sees every instance's lines, in order per instance, and follows an
instance through its crash into its restart; `--recent` reads a crashed instance's last words on its cell;
a follower that stops reading is dropped while the rep's memory stays flat (its RSS measured); a reader
(the role) is refused: logs can hold secrets. The BBS-to-rep hop is HTTP whatever the transport: one
cluster, on http.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.procutil import app_python
from common.tls import CA_CERT, TLSFiles, client_context

from .conftest import (
    ROOT,
    E2ECluster,
    _start_cluster,
    _stop_clusters,
    expect,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e]

APP_PYTHON = app_python()
# Prints "<index> <n>" on stdout every 50 ms, and "<index> err <n>" on stderr every tenth; lives forever.
TICKER = r"""
import os, sys, time
index = os.environ["INSTANCE_INDEX"]
n = 0
while True:
    print(f"{index} {n}", flush=True)
    if n % 10 == 0:
        print(f"{index} err {n}", file=sys.stderr, flush=True)
    n += 1
    time.sleep(0.05)
"""
# Says its last words (one on each stream) and exits 1.
DOOMED = r"""
import sys
print("last words of", sys.argv[1], flush=True)
print("dying breath", file=sys.stderr, flush=True)
sys.exit(1)
"""
# Prints 4 KiB lines as fast as it can, forever.
FLOODER = r"""
import sys
line = b"x" * 4096 + b"\n"
out = sys.stdout.buffer
while True:
    out.write(line)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2ECluster]:
    started: list[E2ECluster] = []
    try:
        yield _start_cluster(started, tmp_path_factory.mktemp("cluster"), "http", cells=2, zones=1)
    finally:
        _stop_clusters(started)


class Follower:
    """`vendue logs APP -f --json` as a process; its lines read in a thread."""

    def __init__(self, c: E2ECluster, *args: str) -> None:
        env = {**os.environ, "VENDUE_BBS_URL": c.lc.bbs_url, "VENDUE_DATA_DIR": str(c.lc.data_dir),
               "NO_COLOR": "1", "TERM": "dumb"}
        self.proc = subprocess.Popen([sys.executable, "-m", "deploy.cli", "logs", *args, "--json"], cwd=ROOT,
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[dict] = queue.Queue()
        self.seen: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def drain(self) -> list[dict]:
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except queue.Empty:
                return self.seen

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
        return err


def ticks(lines: list[dict], guid: str) -> list[int]:
    return [int(line["text"].split()[1]) for line in lines
            if line.get("instance_guid") == guid and line["stream"] == "stdout"]


@pytest.mark.timeout(240)
def test_follow_sees_every_instance_in_order_and_through_a_crash_and_restart(cluster: E2ECluster) -> None:
    c = cluster
    app = c.guid("ticker")
    c.bbs.desire(app, 4, command=[APP_PYTHON, "-c", TICKER], health_check={"type": "process"}, ports=[])
    running = wait_all_running(c.bbs, app, 4, answer=False)
    follower = Follower(c, app, "-f")
    try:
        def from_all_four() -> list[dict]:
            lines = follower.drain()
            guids = {line.get("instance_guid") for line in lines}
            return expect(all(r["instance_guid"] in guids for r in running.values()) and lines,
                          f"{len(lines)} lines, from {sorted(g for g in guids if g)}")

        wait_for(from_all_four, 60.0, "lines from all four instances")
        # Crash instance 0 (its process killed): the follow goes on into its restart, a new instance guid.
        victim = running[0]
        pid = next(lrp["pid"] for lrp in c.rep_state(victim["cell_id"])["lrps"]
                   if lrp["instance_guid"] == victim["instance_guid"])
        os.kill(pid, signal.SIGKILL)

        def restarted() -> str:
            lines = follower.drain()
            zeros = {line["instance_guid"] for line in lines if line.get("index") == 0}
            new = zeros - {victim["instance_guid"]}
            return expect(next((g for g in new if len(ticks(lines, g)) >= 5), ""),
                          f"index 0's instances seen: {sorted(zeros)}")

        new_guid = wait_for(restarted, 90.0, "lines of instance 0's restart in the same follow")
    finally:
        err = follower.stop()
    lines = follower.drain()
    assert "dropped" not in err, err
    for guid in {line["instance_guid"] for line in lines if "instance_guid" in line}:
        numbers = ticks(lines, guid)
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), (
            f"expected {guid}'s lines in order, once each, saw {numbers[:50]}")
    assert ticks(lines, new_guid)[0] <= 5, "the restart's first lines are there"
    times = [line["ns"] for line in lines]
    assert all(line["time"].endswith("Z") and "T" in line["time"] for line in lines)
    assert {line["stream"] for line in lines} == {"stdout", "stderr"}
    assert times == sorted(times) or sum(a > b for a, b in zip(times, times[1:], strict=False)) < 5, (
        "merged in time order (within the relay's reorder window)")
    c.cli("delete", app)  # the cluster is shared


@pytest.mark.timeout(180)
def test_recent_reads_a_crashed_instances_last_words_and_one_stream(cluster: E2ECluster) -> None:
    c = cluster
    app = c.guid("doomed")
    c.bbs.desire(app, 1, command=[APP_PYTHON, "-c", DOOMED, app], health_check={"type": "process"},
                 ports=[])

    def crashed() -> dict:
        [actual] = c.bbs.actuals(app)
        return expect(actual["crash_count"] >= 1 and actual, f"{actual['state']} crash_count "
                                                              f"{actual['crash_count']}")

    wait_for(crashed, 60.0, f"{app} crashed at least once")
    result = c.cli("logs", app, "--recent", "50")
    assert result.code == 0, result.output
    assert f"OUT last words of {app}" in result.stdout and "ERR dying breath" in result.stdout, result.stdout
    errors = c.cli("logs", app, "--stderr", "--json")
    rows = [json.loads(line) for line in errors.stdout.splitlines()]
    assert rows and {row["stream"] for row in rows} == {"stderr"}, errors.output
    assert {row["text"] for row in rows} == {"dying breath"}
    c.cli("delete", app)


# Prints twenty steps a tenth of a second apart, then its result.
STEPPER = r"""
import time
for i in range(20):
    print("step", i, flush=True)
    time.sleep(0.1)
print("result 42", flush=True)
"""


@pytest.mark.timeout(180)
def test_a_tasks_logs_followed_while_it_runs_and_read_once_completed(cluster: E2ECluster) -> None:
    c = cluster
    task = c.guid("stepper")
    follower = None
    c.bbs.create_task(task, [APP_PYTHON, "-c", STEPPER])
    try:
        follower = Follower(c, "--task", task, "-f")
        follower.proc.wait(timeout=60)  # the follow ends with the task
        assert follower.proc.returncode == 0, follower.stop()
    finally:
        if follower is not None and follower.proc.poll() is None:
            follower.stop()
    texts = [line["text"] for line in follower.drain()]
    assert texts and texts[-1] == "result 42", texts
    steps = [int(t.split()[1]) for t in texts if t.startswith("step ")]
    assert steps == sorted(steps) and steps[-1] == 19, texts

    def completed() -> dict:
        done = c.bbs.task(task)
        return expect(done["state"] in ("COMPLETED", "RESOLVING") and done, done["state"])

    wait_for(completed, 30.0, f"task {task} completed")
    after = c.cli("logs", "--task", task)
    assert after.code == 0 and after.stdout.splitlines()[-1].endswith("OUT result 42"), after.output


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.timeout(240)
def test_a_follower_that_stops_reading_is_dropped_and_the_reps_memory_stays_flat(
    cluster: E2ECluster,
) -> None:
    c = cluster
    app = c.guid("flooder")
    c.bbs.desire(app, 1, command=[APP_PYTHON, "-c", FLOODER], health_check={"type": "process"}, ports=[])
    [instance] = wait_all_running(c.bbs, app, 1, answer=False).values()
    rep_pid = c.lc.pids()[c.reps[instance["cell_id"]].component]
    before = rss_kb(rep_pid)

    # A raw TLS connection as the admin that asks to follow and then reads nothing: the kernel's buffers
    # fill, then the BBS's send blocks.
    context = client_context(TLSFiles.in_dir(c.lc.certs_dir, "admin"), ca=c.lc.certs_dir / CA_CERT)
    host, port = c.lc.bbs_url.removeprefix("https://").rstrip("/").rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=30)
    stalled = context.wrap_socket(raw, server_hostname=host)
    stalled.sendall(f"GET /v1/logs/{app}?follow=1 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    peak = before
    try:
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:  # the flood goes on, the follower reads nothing
            peak = max(peak, rss_kb(rep_pid))
            time.sleep(0.2)
        # Now read: what the buffers held (megabytes on loopback), then the end (the BBS dropped it), not an
        # endless stream.
        stalled.settimeout(30)
        received = 0
        ended = time.monotonic() + 60
        while time.monotonic() < ended:
            try:
                chunk = stalled.recv(1 << 16)
            except (ssl.SSLError, ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            received += len(chunk)
        else:
            raise AssertionError(f"expected the BBS to have dropped the stalled follower; still reading "
                                 f"after {received} bytes")
    finally:
        stalled.close()
    grew_mb = (peak - before) / 1024
    print(f"rep RSS before {before} kB, peak {peak} kB; the stalled follower received {received} bytes")
    assert grew_mb < 48, f"expected the rep's RSS flat while a follower stalled, it grew {grew_mb:.1f} MB"
    [still] = wait_all_running(c.bbs, app, 1, answer=False).values()
    assert still["instance_guid"] == instance["instance_guid"], "the app ran on, undisturbed"
    c.cli("delete", app)


@pytest.mark.timeout(120)
def test_a_reader_is_refused_logs(cluster: E2ECluster) -> None:
    import httpx

    c = cluster
    reader = c.lc.issue_certificate("reader", "logs-reader")
    with httpx.Client(base_url=c.lc.bbs_url, verify=client_context(reader, ca=c.lc.certs_dir / CA_CERT),
                      timeout=10.0) as client:
        assert client.get("/v1/desired_lrps").status_code == 200, "a reader reads the state"
        for path in ("/v1/logs/anything", "/v1/tasks/anything/logs"):
            refused = client.get(path)
            assert refused.status_code == 403 and "role reader" in refused.text, (path, refused.text)
