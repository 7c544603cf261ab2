"""The process executor with real child processes (`python -c` programs) on loopback, isolated (as root,
where the machine has the cgroup controllers) and with `--isolation none`."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.models import DesiredLRP, HealthCheck, ModificationTag, Task, TaskCompletion
from common.procutil import app_python, child_preexec, pid_alive
from tests.support.executor_listener import Listener
from tests.support.polling import eventually, finishes

from .cgroups import limits_for
from .disk_quota import MIB
from .executor import LRPContainer, TaskContainer
from .isolation import Isolation, isolation_problem, prepare_isolation
from .log_records import as_text, parse
from .process_executor import PID_NAME, ProcessExecutor, kill_leftovers
from .settings import RepSettings

pytestmark = pytest.mark.timeout(120)

NOW = datetime(2024, 1, 1, tzinfo=UTC)
DEADLINE_S = 30.0  # child Pythons start slowly on a busy 2-core machine
PYTHON = app_python()  # one an app's own user may run

# Listens on $PORT only after LISTEN_DELAY seconds; GET /env answers the vendue variables as JSON.
HTTP_SERVER = """
import http.server, json, os, time
time.sleep(float(os.environ.get("LISTEN_DELAY", "0")))
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        names = ("PORT", "INSTANCE_INDEX", "INSTANCE_GUID", "PROCESS_GUID", "CELL_ID", "GREETING")
        body = json.dumps({k: os.environ.get(k) for k in names} | {"cwd": os.getcwd(), "uid": os.getuid(),
                          "gid": os.getgid(), "groups": os.getgroups()}).encode()
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


def isolation_for(data_dir: Path, **settings: object) -> Isolation:
    """The machine's isolation for a rep with this data dir; skips the test where there is none."""
    rep = RepSettings(data_dir=data_dir, **settings)
    problem = isolation_problem(rep)
    if problem is not None:
        pytest.skip(problem)
    isolation = prepare_isolation(rep)
    assert isolation is not None
    return isolation


@pytest.fixture(params=["cgroups", "none"])
async def executor(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    isolation = isolation_for(tmp_path) if request.param == "cgroups" else None
    ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation, stop_grace_s=0.5, process_grace_s=0.3)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


async def test_running_only_once_the_child_listens_with_its_environment(executor: ProcessExecutor) -> None:
    listening_when_reported: list[bool] = []
    listener = Listener(lambda guid, ports: listening_when_reported.append(listening(ports[0].host_port)))
    executor.start_lrp(
        container([PYTHON, "-c", HTTP_SERVER], env={"LISTEN_DELAY": "1.0", "GREETING": "hi"}),
        listener,
    )
    await eventually(lambda: executor.pid_of("inst-1") is not None,
                     DEADLINE_S, "a child process", lambda: None)
    pid = executor.pid_of("inst-1")
    assert pid is not None and pid_alive(pid)
    assert listener.running == [], "not running before the health check passed"

    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)

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
    if executor.isolation is None:
        assert json.loads((executor.containers_dir / "inst-1" / PID_NAME).read_text())["pid"] == pid

    await executor.stop_lrp("inst-1")

    assert not pid_alive(pid)
    assert listener.crashed == [], "a stop is not a crash"
    assert not (executor.containers_dir / "inst-1").exists(), "a stopped container's directory is removed"


async def test_a_child_killed_by_signal_9_is_reported_crashed(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(container([PYTHON, "-c", HTTP_SERVER]), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)
    pid = executor.pid_of("inst-1")
    assert pid is not None

    os.kill(pid, signal.SIGKILL)

    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: listener.running)
    assert listener.crashed == [("inst-1", "killed by signal 9")]
    kept = executor.containers_dir / "inst-1"
    assert (kept / "output.log").exists(), "a crashed container keeps its log"
    if executor.isolation is not None:
        # The crash is reported before the instance is released (its filesystem unmounted, the directory
        # made root's): wait for the release, then check what it left.
        def kept_as() -> tuple[int, int]:
            return kept.stat().st_uid, kept.stat().st_mode & 0o777

        await eventually(lambda: kept_as() == (0, 0o700), DEADLINE_S,
                         "the kept directory root's and 0700: the next holder of its uid may not enter it",
                         kept_as)


async def test_an_exit_during_startup_is_a_crash_with_its_status(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(container([PYTHON, "-c", "import sys; sys.exit(3)"]), listener)
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: listener.running)
    assert listener.crashed == [("inst-1", "exited with status 3")]
    assert listener.running == []


async def test_an_empty_command_fails_the_start_clearly(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(container([]), listener)
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: None)
    assert "no command" in listener.crashed[0][1]


@pytest.mark.parametrize(("program", "where"), [
    ("/nonexistent/vendue-app", "on the cell"), ("./migrate.sh", "in the instance's directory"),
])
async def test_a_missing_executable_fails_the_start_naming_it(executor: ProcessExecutor, program: str,
                                                              where: str) -> None:
    listener = Listener()
    executor.start_lrp(container([program]), listener)
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: None)
    assert listener.crashed[0][1] == f"failed to start: program {program!r} not found {where}"


async def test_a_child_that_never_listens_fails_its_health_check(executor: ProcessExecutor) -> None:
    listener = Listener()
    never = [PYTHON, "-c", "import time; time.sleep(60)"]
    executor.start_lrp(container(never, check=HealthCheck(type="port", timeout_s=1.0)), listener)
    await eventually(lambda: executor.pid_of("inst-1") is not None,
                     DEADLINE_S, "a child process", lambda: None)
    pid = executor.pid_of("inst-1")
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: listener.running)
    assert listener.crashed == [("inst-1", "health check (port) did not pass within 1s")]
    assert pid is not None
    await eventually(lambda: not pid_alive(pid), DEADLINE_S, "the unhealthy child killed", lambda: pid)


async def test_http_and_process_health_checks(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(
        container([PYTHON, "-c", HTTP_SERVER], guid="h", check=HealthCheck(type="http", path="/env")),
        listener,
    )
    executor.start_lrp(
        container(
            [PYTHON, "-c", "import time; time.sleep(60)"],
            guid="p",
            check=HealthCheck(type="process"),
            ports=[],
        ),
        listener,
    )
    await eventually(lambda: len(listener.running) == 2,
                     DEADLINE_S, "two running reports", lambda: listener.crashed)
    assert {guid for guid, _ in listener.running} == {"h", "p"}


async def test_stop_sends_sigterm_then_sigkill_after_the_grace(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(
        container([PYTHON, "-c", IGNORES_SIGTERM], check=HealthCheck(type="process"), ports=[]),
        listener,
    )
    directory = executor.containers_dir / "inst-1"
    await eventually(
        lambda: bool(listener.running) and (directory / "started").exists(),
        DEADLINE_S, "a running child",
        lambda: listener.crashed,
    )
    pid = executor.pid_of("inst-1")
    assert pid is not None

    stop = asyncio.create_task(executor.stop_lrp("inst-1"))
    await eventually(
        lambda: (directory / "got-sigterm").exists(), DEADLINE_S, "SIGTERM delivered", lambda: pid_alive(pid)
    )
    assert pid_alive(pid), "still alive right after SIGTERM (it ignores it)"
    # It ignores SIGTERM: only the SIGKILL after the grace (0.5 s) can end it, and with it the stop.
    await finishes(stop, DEADLINE_S, "the stop to SIGKILL the child after its grace")

    assert not pid_alive(pid), "SIGKILL after the grace period"
    assert listener.crashed == []


async def test_a_task_reports_exit_status_and_the_tail_of_its_output(executor: ProcessExecutor) -> None:
    listener = Listener()
    script = "import sys; print('x' * 10000); print('the end'); sys.exit(2)"
    executor.run_task(
        TaskContainer(
            "cell-p",
            Task(task_guid="t1", command=[PYTHON, "-c", script], created_at=NOW, updated_at=NOW),
        ),
        listener,
    )
    await eventually(lambda: bool(listener.finished), DEADLINE_S, "a task completion", lambda: None)
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
    ok = Task(task_guid="ok", command=[PYTHON, "-c", "print('done')"], created_at=NOW, updated_at=NOW)
    slow = Task(
        task_guid="slow",
        command=[PYTHON, "-c", "import time; time.sleep(60)"],
        created_at=NOW,
        updated_at=NOW,
    )
    executor.run_task(TaskContainer("cell-p", ok), listener)
    executor.run_task(TaskContainer("cell-p", slow), listener)
    await eventually(lambda: bool(listener.finished), DEADLINE_S, "a task completion", lambda: None)
    assert listener.finished == [TaskCompletion(task_guid="ok", exit_status=0, result="done\n")]

    await asyncio.wait_for(executor.cancel_task("slow"), timeout=DEADLINE_S)

    assert [c.task_guid for c in listener.finished] == ["ok"], "a cancel reports nothing from the executor"


def environ_of(pid: int) -> dict[str, str]:
    """The environment a process was started with (as root: any process's)."""
    items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in items if b"=" in item)


async def test_the_environment_is_exactly_the_lrps_and_vendues_own(
    executor: ProcessExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REP_SECRET", "the rep's, not the app's")
    listener = Listener()
    executor.start_lrp(container([PYTHON, "-c", HTTP_SERVER], env={"GREETING": "hi"}), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)
    pid = executor.pid_of("inst-1")
    assert pid is not None
    directory = executor.containers_dir / "inst-1"

    env = environ_of(pid)

    port = str(listener.running[0][1][0].host_port)
    assert env == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GREETING": "hi",
        "INSTANCE_INDEX": "2", "INSTANCE_GUID": "inst-1", "PROCESS_GUID": "web", "CELL_ID": "cell-p",
        "PORT": port, "HOME": str(directory), "TMPDIR": str(directory / "tmp"),
    }
    assert (directory / "tmp").is_dir()


async def test_an_lrp_may_set_its_own_path(executor: ProcessExecutor) -> None:
    listener = Listener()
    executor.start_lrp(
        container([PYTHON, "-c", HTTP_SERVER], env={"PATH": "/opt/app/bin:/usr/bin"}), listener
    )
    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)
    pid = executor.pid_of("inst-1")
    assert pid is not None and environ_of(pid)["PATH"] == "/opt/app/bin:/usr/bin"


# --- isolation (cgroups) -------------------------------------------------------------------------


@pytest.fixture
async def isolated(tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation_for(tmp_path, pids_limit=16),
                         stop_grace_s=0.5, process_grace_s=0.3)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


async def test_each_isolated_instance_has_its_own_uid_and_directory(isolated: ProcessExecutor) -> None:
    import httpx

    listener = Listener()
    for guid in ("a", "b"):
        isolated.start_lrp(container([PYTHON, "-c", HTTP_SERVER], guid=guid), listener)
    await eventually(lambda: len(listener.running) == 2,
                     DEADLINE_S, "two running reports", lambda: listener.crashed)

    seen = {}
    async with httpx.AsyncClient(timeout=5) as client:
        for guid, ports in listener.running:
            seen[guid] = (await client.get(f"http://127.0.0.1:{ports[0].host_port}/")).json()
    uids = {guid: answer["uid"] for guid, answer in seen.items()}
    assert 0 not in uids.values() and os.geteuid() not in uids.values(), uids
    assert uids["a"] != uids["b"], f"two instances, one uid: {uids}"
    for guid, answer in seen.items():
        assert (answer["gid"], answer["groups"]) == (answer["uid"], []), answer
        directory = isolated.containers_dir / guid
        st = directory.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (answer["uid"], answer["uid"], 0o700)
        assert answer["cwd"] == str(directory)
        assert isolated.isolation is not None
        assert isolated.isolation.users.held() >= set(uids.values())

    await isolated.stop_lrp("a")
    await isolated.stop_lrp("b")

    assert isolated.isolation.users.held().isdisjoint(uids.values()), (
        "the uids go back once the instances are gone"
    )


# Allocates twice its memory_mb (MEMORY_MB below), a MiB at a time, each page touched.
GREEDY = """
import time
chunks = [b"x" * 2**20 for _ in range(2 * 32)]
time.sleep(60)
"""


async def test_an_instance_over_its_memory_is_killed_out_of_memory_and_its_neighbour_runs_on(
    isolated: ProcessExecutor,
) -> None:
    listener = Listener()
    isolated.start_lrp(container([PYTHON, "-c", HTTP_SERVER], guid="neighbour"), listener)
    await eventually(lambda: bool(listener.running),
                     DEADLINE_S, "the neighbour running", lambda: listener.crashed)
    neighbour = isolated.pid_of("neighbour")
    greedy = container([PYTHON, "-c", GREEDY], guid="greedy", check=HealthCheck(type="process"), ports=[])
    isolated.start_lrp(greedy._replace(desired=greedy.desired.model_copy(update={"memory_mb": 32})), listener)

    await eventually(lambda: bool(listener.crashed),
                     DEADLINE_S, "the greedy one crashed", lambda: listener.running)

    assert listener.crashed == [("greedy", "out of memory (killed by signal 9)")]
    assert neighbour is not None and pid_alive(neighbour) and isolated.pid_of("neighbour") == neighbour


# Forks a grandchild in a session of its own (setsid, then a second fork: the classic daemon), which
# writes its pid to escapee.pid and sleeps; then it serves (or, with EXIT_AFTER set, exits 7).
ESCAPES = """
import os, sys, time, pathlib
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print("escapee", os.getpid(), flush=True)  # in output.log, which a crashed instance keeps
        pathlib.Path("escapee.pid").write_text(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
while not pathlib.Path("escapee.pid").exists():
    time.sleep(0.01)
if os.environ.get("EXIT_AFTER"):
    sys.exit(7)
time.sleep(120)
"""


async def test_a_stop_kills_a_setsid_double_forked_escapee(isolated: ProcessExecutor) -> None:
    listener = Listener()
    isolated.start_lrp(
        container([PYTHON, "-c", ESCAPES], check=HealthCheck(type="process"), ports=[]), listener
    )
    pid_file = isolated.containers_dir / "inst-1" / "escapee.pid"
    await eventually(lambda: bool(listener.running) and pid_file.exists() and pid_file.read_text() != "",
                     DEADLINE_S, "running, with its escapee", lambda: listener.crashed)
    escapee = int(pid_file.read_text())
    assert pid_alive(escapee) and os.getsid(escapee) != os.getsid(isolated.pid_of("inst-1") or 0)

    await asyncio.wait_for(isolated.stop_lrp("inst-1"), timeout=DEADLINE_S)

    assert not pid_alive(escapee), "a stop kills everything in the instance's cgroup"


async def test_a_main_process_that_exits_leaves_nothing_behind(isolated: ProcessExecutor) -> None:
    listener = Listener()
    isolated.start_lrp(container([PYTHON, "-c", ESCAPES], env={"EXIT_AFTER": "1"},
                                 check=HealthCheck(type="process", timeout_s=DEADLINE_S), ports=[]), listener)
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: listener.running)
    assert listener.crashed == [("inst-1", "exited with status 7")]
    escapee = int(log_text(isolated.containers_dir / "inst-1" / "output.log").split()[-1])
    assert not pid_alive(escapee), "the escapee went with its main process"


# Forks until the pids limit refuses, says so, and keeps trying.
FORK_BOMB = """
import os, time, pathlib
while True:
    try:
        os.fork()
    except OSError:
        pathlib.Path("limited").touch()
        time.sleep(0.05)
"""


async def test_a_fork_bomb_stops_at_the_pids_limit_and_the_executor_runs_on(
    isolated: ProcessExecutor,
) -> None:
    listener = Listener()
    bomb = container([PYTHON, "-c", FORK_BOMB], guid="bomb", check=HealthCheck(type="process"), ports=[])
    isolated.start_lrp(bomb, listener)
    await eventually(lambda: (isolated.containers_dir / "bomb" / "limited").exists(),
                     DEADLINE_S, "a fork refused",
                     lambda: listener.crashed)
    cgroup = isolated._lrps["bomb"].sandbox.cgroup
    assert cgroup is not None and 1 < len(cgroup.pids()) <= 16, cgroup.pids()

    await asyncio.wait_for(isolated.stop_lrp("bomb"), timeout=DEADLINE_S)

    assert cgroup.pids() == set() and not cgroup.dirs[0].exists()
    isolated.start_lrp(container([PYTHON, "-c", HTTP_SERVER], guid="after"), listener)
    await eventually(lambda: [g for g, _ in listener.running if g == "after"] == ["after"],
                     DEADLINE_S, "another instance running", lambda: (listener.crashed, listener.running,
                     log_text(isolated.containers_dir / "after" / "output.log")))


async def test_a_restarted_rep_kills_what_its_previous_run_left_in_its_cgroups(tmp_path: Path) -> None:
    isolation = isolation_for(tmp_path)
    cgroup = isolation.cgroups.cell("cell-p").create("old-guid", limits_for(64, 16))
    (isolation.instances_dir("cell-p") / "old-guid").mkdir(parents=True)
    stray = subprocess.Popen(["sleep", "60"], start_new_session=True,
                             preexec_fn=child_preexec(die_with_parent=False, cgroup_procs=cgroup.procs_files,
                                                      uid=65534, gid=65534))
    try:
        assert cgroup.pids() == {stray.pid}
        ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation)

        await ex.open()

        assert stray.wait(timeout=DEADLINE_S) == -signal.SIGKILL
        assert not cgroup.dirs[0].exists() and list(ex.containers_dir.iterdir()) == []
        await ex.close()
        assert not ex.containers_dir.exists()
    finally:
        stray.kill()
        stray.wait(timeout=DEADLINE_S)
        cgroup.remove()
        isolation.cgroups.cell("cell-p").remove()
        shutil.rmtree(isolation.instances_root, ignore_errors=True)


async def test_leftovers_of_a_previous_run_are_killed(tmp_path: Path) -> None:
    containers = tmp_path / "cell-p" / "containers"
    leftover = containers / "old-guid"
    leftover.mkdir(parents=True)
    proc = subprocess.Popen(
        [PYTHON, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "INSTANCE_GUID": "old-guid"},
        start_new_session=True,
        preexec_fn=child_preexec(),
    )
    stranger = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(60)"], start_new_session=True)
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


@pytest.fixture(params=["cgroups", "none"])
async def quick_disk_executor(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ProcessExecutor]:
    """disk_mb measured (the poll), isolated or not."""
    isolation = isolation_for(tmp_path, disk_quota="poll") if request.param == "cgroups" else None
    ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation, stop_grace_s=0.5, process_grace_s=0.3,
                         disk_check_interval_s=0.1, log_cap_bytes=8192)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


async def test_an_instance_past_its_disk_mb_is_stopped_and_crashed_with_the_reason(
    quick_disk_executor: ProcessExecutor,
) -> None:
    executor, listener = quick_disk_executor, Listener()
    running = container([PYTHON, "-c", FILLS_ITS_DISK], env={"FILL_MB": "12"})
    executor.start_lrp(running._replace(desired=running.desired.model_copy(update={"disk_mb": 8})), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)
    pid = executor.pid_of("inst-1")
    assert pid is not None

    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: listener.running)

    [(guid, reason)] = listener.crashed
    assert (
        guid == "inst-1"
        and reason.startswith("disk quota exceeded (")
        and reason.endswith(" MB used of 8 MB)")
    )
    assert 8 < int(reason.split("(")[1].split()[0]) <= 13, reason
    assert not pid_alive(pid)
    directory = executor.containers_dir / "inst-1"
    assert sorted(p.name for p in directory.iterdir()) == ["output.log"], "only the log is kept, not the fill"


@pytest.mark.parametrize("isolated", [True, False])
async def test_a_task_that_ends_past_its_disk_mb_fails_with_the_reason(
    tmp_path: Path, isolated: bool
) -> None:
    # No round between start and exit (a minute apart): only the measurement on exit can catch it.
    isolation = isolation_for(tmp_path, disk_quota="poll") if isolated else None
    executor = ProcessExecutor(tmp_path, "cell-p", isolation=isolation, stop_grace_s=0.5,
                               disk_check_interval_s=60.0)
    await executor.open()
    try:
        listener = Listener()
        script = "import os\nwith open('fill', 'wb') as f: f.write(os.urandom(3 << 20))\nprint('wrote it')"
        task = Task(task_guid="t1", command=[PYTHON, "-c", script], disk_mb=2, created_at=NOW,
                    updated_at=NOW)
        executor.run_task(TaskContainer("cell-p", task), listener)
        await eventually(lambda: bool(listener.finished), DEADLINE_S, "a task completion", lambda: None)
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
    # 8 KiB cap: output.log rotates every 4 KiB of records (~128 lines here), so what is kept straddles
    # output.log.1 and output.log, and is less than 4 KiB of text.
    script = "import sys\nfor i in range(2000): print(f'{i:09d}')\nprint('the end')"
    task = Task(task_guid="t1", command=[PYTHON, "-c", script], created_at=NOW, updated_at=NOW)
    quick_disk_executor.run_task(TaskContainer("cell-p", task), listener)
    await eventually(lambda: bool(listener.finished), DEADLINE_S, "a task completion", lambda: None)
    [done] = listener.finished
    written = "".join(f"{i:09d}\n" for i in range(2000)) + "the end\n"
    assert not done.failed and written.endswith(done.result), "the result is the end of the output"
    assert len(done.result) > 4096 // 32 * 10, "it spans both files (a file holds ~128 records of 32 bytes)"


# --- disk_mb as a filesystem of the instance's own (rep/disk_quota.py) ----------------------------------

# Serves $PORT, then writes up to $FILL_MB MB into its directory; says how far it got and how it ended.
WRITES_UNTIL_FULL = HTTP_SERVER.replace(
    "http.server.HTTPServer(",
    "import threading\n"
    "def fill():\n"
    "    written = 0\n"
    "    try:\n"
    "        with open('fill', 'wb', buffering=0) as f:\n"
    "            for _ in range(int(os.environ['FILL_MB']) * 16):\n"
    "                written += f.write(b'x' * (1 << 16))\n"
    "        print('wrote', written, 'ok', flush=True)\n"
    "    except OSError as exc:\n"
    "        print('wrote', written, 'errno', exc.errno, flush=True)\n"
    "threading.Thread(target=fill).start()\n"
    "http.server.HTTPServer(",
)


@pytest.fixture
async def fs_executor(tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    """Isolated, disk_mb a loop-mounted filesystem per instance; measured every 0.1 s were it polled."""
    isolation = isolation_for(tmp_path)
    if isolation.disks is None:
        pytest.skip(f"this host offers no loop-mounted filesystems ({isolation.name})")
    ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation, stop_grace_s=0.5, process_grace_s=0.3,
                         disk_check_interval_s=0.1)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


def log_text(path: Path) -> str:
    """What an output log's records say, one line each (rep/log_records.py)."""
    return as_text(parse(path.read_bytes()))


def written(directory: Path) -> list[str]:
    """The filler's last line: ["wrote", N, "errno", E] or ["wrote", N, "ok"] ([] before it)."""
    try:
        lines = log_text(directory / "output.log").splitlines()
    except FileNotFoundError:
        return []
    return next((line.split() for line in reversed(lines) if line.startswith("wrote ")), [])


async def test_a_write_past_disk_mb_fails_with_enospc_and_the_instance_runs_on(
    fs_executor: ProcessExecutor,
) -> None:
    executor, listener = fs_executor, Listener()
    filler = container([PYTHON, "-c", WRITES_UNTIL_FULL], env={"FILL_MB": "40"})
    neighbour = container([PYTHON, "-c", WRITES_UNTIL_FULL], guid="inst-2", env={"FILL_MB": "4"})
    for c in (filler, neighbour):
        executor.start_lrp(c._replace(desired=c.desired.model_copy(update={"disk_mb": 8})), listener)
    directory = executor.containers_dir / "inst-1"
    await eventually(lambda: len(listener.running) == 2, DEADLINE_S, "both running", lambda: listener.crashed)
    await eventually(lambda: bool(written(directory)), DEADLINE_S, "the filler's verdict",
                     lambda: written(directory))

    [_, amount, how, *errno] = written(directory)
    assert (how, errno) == ("errno", ["28"]), f"expected ENOSPC, saw {written(directory)}"
    # Its log and its files' metadata count against it too, as `du` counts them.
    assert 7.75 * MIB <= int(amount) <= 8 * MIB, f"expected ENOSPC at 8 MB, saw {int(amount) / MIB:.3f} MB"
    assert os.path.ismount(directory)
    neighbours = executor.containers_dir / "inst-2"
    await eventually(lambda: bool(written(neighbours)), DEADLINE_S, "the neighbour's verdict",
                     lambda: written(neighbours))
    assert written(neighbours) == ["wrote", str(4 * MIB), "ok"], "a neighbour writes in its own filesystem"
    # Full, it runs on: no stop for five rounds of the poll, were there one.
    loop = asyncio.get_running_loop()
    held_until = loop.time() + 0.5
    while loop.time() < held_until:
        assert listener.crashed == [] and executor.pid_of("inst-1") is not None, listener.crashed
        await asyncio.sleep(0.05)  # the interval between looks at what must hold

    image = executor.isolation.disks.image_of("cell-p", "inst-1")  # type: ignore[union-attr]
    assert image.is_file()
    await finishes(executor.stop_lrp("inst-1"), DEADLINE_S, "the stop")
    assert not directory.exists() and not image.exists(), "a removed instance leaves no filesystem behind"


async def test_a_crashed_instance_keeps_its_log_but_not_its_filesystem(fs_executor: ProcessExecutor) -> None:
    executor, listener = fs_executor, Listener()
    script = "import os\nprint('last words', flush=True)\nos._exit(3)"
    executor.start_lrp(container([PYTHON, "-c", script], check=HealthCheck(type="process", timeout_s=10),
                                 ports=[]), listener)
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: listener.running)
    directory = executor.containers_dir / "inst-1"
    image = executor.isolation.disks.image_of("cell-p", "inst-1")  # type: ignore[union-attr]
    await eventually(lambda: not image.exists(), DEADLINE_S, "its image deleted",
                     lambda: list(directory.iterdir()))

    assert not os.path.ismount(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["output.log"]
    assert log_text(directory / "output.log") == "last words\n"


async def test_a_restarted_rep_unmounts_the_filesystems_its_previous_run_left(tmp_path: Path) -> None:
    isolation = isolation_for(tmp_path)
    if isolation.disks is None:
        pytest.skip(f"this host offers no loop-mounted filesystems ({isolation.name})")
    isolation.open_cell("cell-p")
    # What a rep killed with -9 leaves: an instance's directory mounted, its image.
    left = isolation.instances_dir("cell-p") / "inst-old"
    left.mkdir()
    image = isolation.disks.image_of("cell-p", "inst-old")
    isolation.disks.attach(image, left, 4, 0, 0)
    assert os.path.ismount(left)

    executor = ProcessExecutor(tmp_path, "cell-p", isolation=isolation)
    await executor.open()
    try:
        assert not os.path.ismount(left) and not left.exists() and not image.exists()
    finally:
        await executor.close()


# Writes a 3 MiB file in its directory and touches 40 MiB of memory, then serves.
USES_SOME = (
    "import os\n"
    "open('data', 'wb').write(os.urandom(3 << 20))\n"
    "block = bytearray(40 << 20)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    + HTTP_SERVER.split("\n", 1)[1]
)


@pytest.fixture(params=["cgroups", "none"])
async def sampling_executor(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    """Usage sampled every 0.1 s; disk_mb measured by the poll (the instance's directory is on the host's
    filesystem: what it uses is its tree, not the filesystem's)."""
    isolation = isolation_for(tmp_path, disk_quota="poll") if request.param == "cgroups" else None
    ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation, stop_grace_s=0.5, process_grace_s=0.3,
                         usage_interval_s=0.1)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


async def test_usage_is_sampled_from_the_instances_cgroup_and_directory(
    sampling_executor: ProcessExecutor,
) -> None:
    executor, listener = sampling_executor, Listener()
    executor.start_lrp(container([PYTHON, "-c", USES_SOME]), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)
    isolated = executor.isolation is not None

    def sampled() -> bool:
        found = executor.usage()
        return bool(found) and (found[0].cpu is not None or not isolated)

    await eventually(sampled, DEADLINE_S, "two samples", executor.usage)
    [usage] = executor.usage()
    assert (usage.process_guid, usage.index, usage.instance_guid) == ("web", 2, "inst-1")
    assert 38 * MIB <= usage.memory_bytes <= 120 * MIB, usage
    assert 3 * MIB <= usage.disk_bytes <= 20 * MIB, usage  # its tree, never the host's filesystem
    assert (usage.memory_limit_bytes, usage.disk_limit_bytes) == (256 * MIB, 1024 * MIB), usage
    assert (usage.cpu is not None) == isolated and (usage.cpu is None or 0 <= usage.cpu < 2.0), usage
    await executor.stop_lrp("inst-1")
    assert executor.usage() == []
