"""`vendue up` as a real subprocess: it serves until interrupted, stops every child on Ctrl-C or SIGTERM,
and leaves no orphan even when it is killed with SIGKILL (PR_SET_PDEATHSIG on every child)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from common.procutil import child_preexec, pid_alive, terminate_then_kill

from .cli import _register, app
from .cluster import CLUSTER_FILE, ENTRY_POINT, PROJECT_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
_register()

APP_SOURCE = (
    "import http.server, os; "
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), http.server.BaseHTTPRequestHandler)"
    ".serve_forever()"
)


def wait_for(condition: Callable[[], Any], timeout: float, expected: str, seen: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"expected {expected} within {timeout:g}s; saw {seen()}")
        time.sleep(0.05)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc: children's children too)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] not in ("Z", "X"):
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.update(children)
        frontier.extend(children)
    return found


def alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if pid_alive(pid) and "Z" not in _state(pid)}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


@pytest.fixture
def vendue_up(tmp_path: Path) -> Iterator[Callable[..., tuple[subprocess.Popen[bytes], dict[str, Any]]]]:
    """Start `vendue up` in its own session; whatever it leaves is killed (and reported) at the end."""
    started: list[subprocess.Popen[bytes]] = []
    tracked: set[int] = set()

    def start(*args: str) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
        data_dir = tmp_path / f"up{len(started)}"
        log = open(tmp_path / f"up{len(started)}.out", "wb")  # noqa: SIM115 - the child holds it
        proc = subprocess.Popen([*ENTRY_POINT, "up", "--data-dir", str(data_dir), *args], stdout=log,
                                stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, start_new_session=True,
                                preexec_fn=child_preexec(), env={**os.environ, "COLUMNS": "160"})
        log.close()
        started.append(proc)
        info_path = data_dir / CLUSTER_FILE
        wait_for(lambda: info_path.exists() or proc.poll() is not None, 90.0, "cluster.json",
                 lambda: (tmp_path / f"up{len(started) - 1}.out").read_text())
        assert proc.poll() is None, (tmp_path / f"up{len(started) - 1}.out").read_text()
        tracked.update(descendants(proc.pid))
        return proc, json.loads(info_path.read_text())

    yield start

    for proc in started:
        tracked.update(descendants(proc.pid))
        if proc.poll() is None:
            terminate_then_kill(proc, grace_s=15.0)
    leftovers = alive(tracked)
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"processes outlived the test: {leftovers}"


def push_app(bbs_url: str, name: str, instances: int) -> None:
    body = {"process_guid": name, "instances": instances, "memory_mb": 64, "disk_mb": 32,
            "command": [sys.executable, "-c", APP_SOURCE]}
    assert httpx.post(f"{bbs_url}/v1/desired_lrps", json=body, timeout=5.0).status_code == 201

    def running() -> bool:
        items = httpx.get(f"{bbs_url}/v1/actual_lrps", params={"process_guid": name}, timeout=5.0).json()["items"]
        return sum(1 for a in items if a["state"] == "RUNNING") == instances

    wait_for(running, 30.0, f"{instances} running instances of {name}",
             lambda: httpx.get(f"{bbs_url}/v1/actual_lrps", timeout=5.0).json()["items"])


def test_up_bad_arguments_exit_2_with_one_line(tmp_path: Path):
    for args, field in ((["--cells", "0"], "--cells"), (["--executor", "docker"], "--executor"),
                        (["--zones", "x"], "--zones")):
        result = CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path), *args])
        assert result.exit_code == 2, result.output
        assert len(result.stderr.splitlines()) == 1 and field in result.stderr, result.stderr


def test_no_orphans_after_kill_9_of_the_launcher(vendue_up):
    proc, info = vendue_up("--cells", "2", "--zones", "2")
    push_app(info["bbs_url"], "orphan-check", 2)
    tree = descendants(proc.pid)
    components = {info["components"][name]["pid"] for name in info["components"]}
    assert components <= tree, f"expected the components {components} below the launcher {proc.pid}"
    assert len(tree) >= len(components) + 2, f"expected the 2 app instances below the reps too: {tree}"

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10.0)
    wait_for(lambda: not alive(tree), 15.0, "every process of the killed launcher's tree gone",
             lambda: alive(tree))


def test_ctrl_c_stops_every_child_and_exits_0(vendue_up):
    proc, info = vendue_up("--cells", "1", "--zones", "1")
    tree = descendants(proc.pid)
    assert httpx.get(f"{info['bbs_url']}/ping", timeout=2.0).status_code == 200
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30.0) == 0
    assert not alive(tree), f"children left after `vendue up` stopped: {alive(tree)}"
    assert not Path(info["data_dir"], CLUSTER_FILE).exists()
