"""The process executor with real child processes (`python -c` programs) on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.models import DesiredLRP, HealthCheck, ModificationTag, PortMapping, Task, TaskCompletion
from common.procutil import child_preexec, pid_alive

from .executor import LRPContainer, TaskContainer
from .process_executor import PID_NAME, ProcessExecutor, kill_leftovers

pytestmark = pytest.mark.timeout(120)

NOW = datetime(2024, 1, 1, tzinfo=UTC)
DEADLINE_S = 30.0  # child Pythons start slowly on a busy 2-core machine

# Listens on $PORT only after LISTEN_DELAY seconds; GET /env answers the vendue variables as JSON.
HTTP_SERVER = """
import http.server, json, os, time
time.sleep(float(os.environ.get("LISTEN_DELAY", "0")))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        names = ("PORT", "INSTANCE_INDEX", "INSTANCE_GUID", "PROCESS_GUID", "CELL_ID", "GREETING")
        body = json.dumps({k: os.environ.get(k) for k in names} | {"cwd": os.getcwd()}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
"""

# Records SIGTERM in a file and keeps running: only SIGKILL ends it.
IGNORES_SIGTERM = """
import signal, time, pathlib
def note(signum, frame):
    pathlib.Path("got-sigterm").write_text("yes")
signal.signal(signal.SIGTERM, note)
pathlib.Path("started").write_text("yes")
while True:
    time.sleep(0.05)
"""


class Listener:
    def __init__(self, on_running: Callable[[str, list[PortMapping]], None] | None = None) -> None:
        self.running: list[tuple[str, list[PortMapping]]] = []
        self.crashed: list[tuple[str, str]] = []
        self.finished: list[TaskCompletion] = []
        self._on_running = on_running

    def lrp_running(self, instance_guid: str, ports: list[PortMapping]) -> None:
        if self._on_running is not None:
            self._on_running(instance_guid, ports)
        self.running.append((instance_guid, ports))

    def lrp_crashed(self, instance_guid: str, reason: str) -> None:
        self.crashed.append((instance_guid, reason))

    def task_finished(self, completion: TaskCompletion) -> None:
        self.finished.append(completion)


async def eventually(condition: Callable[[], bool], what: str, seen: Callable[[], object]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"expected {what} within {DEADLINE_S}s; saw {seen()!r}")
        await asyncio.sleep(0.02)


def container(
    command: list[str],
    guid: str = "inst-1",
    check: HealthCheck | None = None,
    env: dict[str, str] | None = None,
    ports: list[int] | None = None,
) -> LRPContainer:
    desired = DesiredLRP(
        process_guid="web",
        command=command,
        env=env or {},
        ports=[8080] if ports is None else ports,
        health_check=check or HealthCheck(type="port", timeout_s=DEADLINE_S),
        created_at=NOW,
        modification_tag=ModificationTag(epoch="e"),
    )
    return LRPContainer(cell_id="cell-p", instance_guid=guid, index=2, desired=desired)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    ex = ProcessExecutor(tmp_path, "cell-p", stop_grace_s=0.5, process_grace_s=0.3)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


async def test_running_only_once_the_child_listens_with_its_environment(executor: ProcessExecutor) -> None:
    listening_when_reported: list[bool] = []
    listener = Listener(lambda guid, ports: listening_when_reported.append(listening(ports[0].host_port)))
    executor.start_lrp(
        container([sys.executable, "-c", HTTP_SERVER], env={"LISTEN_DELAY": "1.0", "GREETING": "hi"}),
        listener,
    )
    await eventually(lambda: executor.pid_of("inst-1") is not None, "a child process", lambda: None)
    pid = executor.pid_of("inst-1")
    assert pid is not None and pid_alive(pid)
    assert listener.running == [], "not running before the health check passed"

    await eventually(lambda: bool(listener.running), "a running report", lambda: listener.crashed)

    assert listening_when_reported == [True]
    ((guid, ports),) = listener.running
    assert guid == "inst-1" and ports[0].container_port == 8080
    import httpx

    async with httpx.AsyncClient(timeout=5) as client:
        env = (await client.get(f"http://127.0.0.1:{ports[0].host_port}/env")).json()
    assert env["PORT"] == str(ports[0].host_port)
    assert (env["INSTANCE_INDEX"], env["INSTANCE_GUID"], env["PROCESS_GUID"], env["CELL_ID"]) == (
        "2",
        "inst-1",
        "web",
        "cell-p",
    )
    assert env["GREETING"] == "hi"
    assert env["cwd"] == str(executor.containers_dir / "inst-1")
    assert json.loads((executor.containers_dir / "inst-1" / PID_NAME).read_text())["pid"] == pid

    await executor.stop_lrp("inst-1")

    assert not pid_alive(pid)
    assert listener.crashed == [], "a stop is not a crash"
    assert not (executor.containers_dir / "inst-1").exists(), "a stopped container's directory is removed"


async def test_a_child_killed_by_signal_9_is_reported_crashed(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(container([sys.executable, "-c", HTTP_SERVER]), listener)
    await eventually(lambda: bool(listener.running), "a running report", lambda: listener.crashed)
    pid = executor.pid_of("inst-1")
    assert pid is not None

    os.kill(pid, signal.SIGKILL)

    await eventually(lambda: bool(listener.crashed), "a crash report", lambda: listener.running)
    assert listener.crashed == [("inst-1", "killed by signal 9")]
    assert (executor.containers_dir / "inst-1" / "output.log").exists(), "a crashed container keeps its log"


async def test_an_exit_during_startup_is_a_crash_with_its_status(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(container([sys.executable, "-c", "import sys; sys.exit(3)"]), listener)
    await eventually(lambda: bool(listener.crashed), "a crash report", lambda: listener.running)
    assert listener.crashed == [("inst-1", "exited with status 3")]
    assert listener.running == []


async def test_an_empty_command_fails_the_start_clearly(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(container([]), listener)
    await eventually(lambda: bool(listener.crashed), "a crash report", lambda: None)
    assert "no command" in listener.crashed[0][1]


async def test_a_missing_executable_fails_the_start(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(container(["/nonexistent/vendue-app"]), listener)
    await eventually(lambda: bool(listener.crashed), "a crash report", lambda: None)
    assert listener.crashed[0][1].startswith("failed to start:")


async def test_a_child_that_never_listens_fails_its_health_check(executor: ProcessExecutor) -> None:
    listener = Listener()
    never = [sys.executable, "-c", "import time; time.sleep(60)"]
    executor.start_lrp(container(never, check=HealthCheck(type="port", timeout_s=1.0)), listener)
    await eventually(lambda: executor.pid_of("inst-1") is not None, "a child process", lambda: None)
    pid = executor.pid_of("inst-1")
    await eventually(lambda: bool(listener.crashed), "a crash report", lambda: listener.running)
    assert listener.crashed == [("inst-1", "health check (port) did not pass within 1s")]
    assert pid is not None
    await eventually(lambda: not pid_alive(pid), "the unhealthy child killed", lambda: pid)


async def test_http_and_process_health_checks(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(
        container([sys.executable, "-c", HTTP_SERVER], guid="h", check=HealthCheck(type="http", path="/env")),
        listener,
    )
    executor.start_lrp(
        container(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            guid="p",
            check=HealthCheck(type="process"),
            ports=[],
        ),
        listener,
    )
    await eventually(lambda: len(listener.running) == 2, "two running reports", lambda: listener.crashed)
    assert {guid for guid, _ in listener.running} == {"h", "p"}


async def test_stop_sends_sigterm_then_sigkill_after_the_grace(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(
        container([sys.executable, "-c", IGNORES_SIGTERM], check=HealthCheck(type="process"), ports=[]),
        listener,
    )
    directory = executor.containers_dir / "inst-1"
    await eventually(
        lambda: bool(listener.running) and (directory / "started").exists(),
        "a running child",
        lambda: listener.crashed,
    )
    pid = executor.pid_of("inst-1")
    assert pid is not None

    stop = asyncio.create_task(executor.stop_lrp("inst-1"))
    await eventually(
        lambda: (directory / "got-sigterm").exists(), "SIGTERM delivered", lambda: pid_alive(pid)
    )
    assert pid_alive(pid), "still alive right after SIGTERM (it ignores it)"
    started = time.monotonic()
    await asyncio.wait_for(stop, timeout=DEADLINE_S)

    assert time.monotonic() - started < 5.0
    assert not pid_alive(pid), "SIGKILL after the grace period"
    assert listener.crashed == []


async def test_a_task_reports_exit_status_and_the_tail_of_its_output(executor: ProcessExecutor) -> None:
    listener = Listener()
    script = "import sys; print('x' * 10000); print('the end'); sys.exit(2)"
    executor.run_task(
        TaskContainer(
            "cell-p",
            Task(task_guid="t1", command=[sys.executable, "-c", script], created_at=NOW, updated_at=NOW),
        ),
        listener,
    )
    await eventually(lambda: bool(listener.finished), "a task completion", lambda: None)
    (done,) = listener.finished
    assert (done.task_guid, done.failed, done.exit_status, done.failure_reason) == (
        "t1",
        True,
        2,
        "exited with status 2",
    )
    assert len(done.result.encode()) == 4096
    assert done.result.endswith("the end\n")


async def test_a_successful_task_and_a_cancelled_one(executor: ProcessExecutor) -> None:
    listener = Listener()
    ok = Task(task_guid="ok", command=[sys.executable, "-c", "print('done')"], created_at=NOW, updated_at=NOW)
    slow = Task(
        task_guid="slow",
        command=[sys.executable, "-c", "import time; time.sleep(60)"],
        created_at=NOW,
        updated_at=NOW,
    )
    executor.run_task(TaskContainer("cell-p", ok), listener)
    executor.run_task(TaskContainer("cell-p", slow), listener)
    await eventually(lambda: bool(listener.finished), "a task completion", lambda: None)
    assert listener.finished == [TaskCompletion(task_guid="ok", exit_status=0, result="done\n")]

    await asyncio.wait_for(executor.cancel_task("slow"), timeout=DEADLINE_S)

    assert [c.task_guid for c in listener.finished] == ["ok"], "a cancel reports nothing from the executor"


async def test_leftovers_of_a_previous_run_are_killed(tmp_path: Path) -> None:
    containers = tmp_path / "cell-p" / "containers"
    leftover = containers / "old-guid"
    leftover.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "INSTANCE_GUID": "old-guid"},
        start_new_session=True,
        preexec_fn=child_preexec(),
    )
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        (leftover / PID_NAME).write_text(json.dumps({"pid": proc.pid, "guid": "old-guid"}))
        (containers / "reused-pid").mkdir()
        (containers / "reused-pid" / PID_NAME).write_text(
            json.dumps({"pid": stranger.pid, "guid": "reused-pid"})
        )

        killed = kill_leftovers(containers)

        assert killed == [proc.pid]
        assert proc.wait(timeout=DEADLINE_S) == -signal.SIGKILL
        assert stranger.poll() is None, "a process without the container's guid is not ours"
        assert list(containers.iterdir()) == []
    finally:
        for p in (proc, stranger):
            p.kill()
            p.wait(timeout=DEADLINE_S)


# --- disk quota and output log (rep/disk_usage.py, rep/output_log.py) ------------------------------

# Serves $PORT, then writes $FILL_MB MB into its directory (and says so), then keeps serving.
FILLS_ITS_DISK = HTTP_SERVER.replace(
    "http.server.HTTPServer(",
    "import threading\n"
    "def fill():\n"
    "    time.sleep(0.3)\n"
    "    with open('fill', 'wb') as f:\n"
    "        for _ in range(int(os.environ['FILL_MB'])): f.write(os.urandom(1 << 20)); f.flush()\n"
    "    print('filled', flush=True)\n"
    "threading.Thread(target=fill).start()\n"
    "http.server.HTTPServer(",
)


@pytest.fixture
async def quick_disk_executor(tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    ex = ProcessExecutor(tmp_path, "cell-p", stop_grace_s=0.5, process_grace_s=0.3, disk_check_interval_s=0.1,
                         log_cap_bytes=8192)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


async def test_an_instance_past_its_disk_mb_is_stopped_and_crashed_with_the_reason(
    quick_disk_executor: ProcessExecutor,
) -> None:
    executor, listener = quick_disk_executor, Listener()
    running = container([sys.executable, "-c", FILLS_ITS_DISK], env={"FILL_MB": "12"})
    executor.start_lrp(running._replace(desired=running.desired.model_copy(update={"disk_mb": 8})), listener)
    await eventually(lambda: bool(listener.running), "a running report", lambda: listener.crashed)
    pid = executor.pid_of("inst-1")
    assert pid is not None

    await eventually(lambda: bool(listener.crashed), "a crash report", lambda: listener.running)

    [(guid, reason)] = listener.crashed
    assert guid == "inst-1" and reason.startswith("disk quota exceeded (") and reason.endswith(" MB used of 8 MB)")
    assert 8 < int(reason.split("(")[1].split()[0]) <= 13, reason
    assert not pid_alive(pid)
    directory = executor.containers_dir / "inst-1"
    assert sorted(p.name for p in directory.iterdir()) == ["output.log"], "only the log is kept, not the fill"


async def test_a_task_that_ends_past_its_disk_mb_fails_with_the_reason(tmp_path: Path) -> None:
    # No round between start and exit (a minute apart): only the measurement on exit can catch it.
    executor = ProcessExecutor(tmp_path, "cell-p", stop_grace_s=0.5, disk_check_interval_s=60.0)
    await executor.open()
    try:
        listener = Listener()
        script = "import os\nwith open('fill', 'wb') as f: f.write(os.urandom(3 << 20))\nprint('wrote it')"
        task = Task(task_guid="t1", command=[sys.executable, "-c", script], disk_mb=2, created_at=NOW,
                    updated_at=NOW)
        executor.run_task(TaskContainer("cell-p", task), listener)
        await eventually(lambda: bool(listener.finished), "a task completion", lambda: None)
    finally:
        executor.kill_all()
        await executor.close()
    [done] = listener.finished
    assert (done.failed, done.exit_status, done.result) == (True, 0, "wrote it\n")
    used = done.failure_reason.removeprefix("disk quota exceeded (").removesuffix(" MB used of 2 MB)")
    assert used.isdigit() and int(used) >= 3, f"expected the quota's reason, saw {done.failure_reason!r}"


async def test_a_tasks_result_is_its_last_4_kib_across_the_rotated_log(
    quick_disk_executor: ProcessExecutor,
) -> None:
    listener = Listener()
    # 8 KiB cap: output.log rotates every 4 KiB, so the last 4 KiB straddle output.log.1 and output.log.
    script = "import sys\nfor i in range(2000): print(f'{i:09d}')\nprint('the end')"
    task = Task(task_guid="t1", command=[sys.executable, "-c", script], created_at=NOW, updated_at=NOW)
    quick_disk_executor.run_task(TaskContainer("cell-p", task), listener)
    await eventually(lambda: bool(listener.finished), "a task completion", lambda: None)
    [done] = listener.finished
    written = "".join(f"{i:09d}\n" for i in range(2000)) + "the end\n"
    assert not done.failed and done.result == written[-4096:]
