"""`vendue exec`'s executor piece: ProcessExecutor.open_exec with real child processes, isolated (as root,
where the machine has the cgroup controllers) and with `--isolation none`; the sim executor refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.exec_stream import STDERR, STDOUT
from common.models import DesiredLRP, HealthCheck, ModificationTag
from common.procutil import app_python, pid_alive
from tests.support.executor_listener import Listener
from tests.support.polling import eventually

from .executor import ExecRefused, ExecSession, LRPContainer
from .isolation import isolation_problem, prepare_isolation
from .process_executor import ProcessExecutor
from .settings import RepSettings
from .sim_executor import SimExecutor

pytestmark = pytest.mark.timeout(120)

DEADLINE_S = 30.0
SERVER = "import http.server, os\nhttp.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), " \
         "http.server.BaseHTTPRequestHandler).serve_forever()"


@pytest.fixture(params=["cgroups", "none"])
async def executor(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    isolation = None
    if request.param == "cgroups":
        settings = RepSettings(data_dir=tmp_path)
        problem = isolation_problem(settings)
        if problem is not None:
            pytest.skip(problem)
        isolation = prepare_isolation(settings)
    ex = ProcessExecutor(tmp_path, "cell-x", isolation=isolation, stop_grace_s=0.5, process_grace_s=0.3)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


async def running(executor: ProcessExecutor, guid: str = "inst-1") -> tuple[int, int]:
    """Start an instance; (its port, its main process's uid) once it runs."""
    desired = DesiredLRP(process_guid="web", command=[app_python(), "-c", SERVER], env={"GREETING": "hi"},
                         health_check=HealthCheck(type="port", timeout_s=DEADLINE_S),
                         created_at=datetime(2024, 1, 1, tzinfo=UTC),
                         modification_tag=ModificationTag(epoch="e"))
    listener = Listener()
    executor.start_lrp(LRPContainer("cell-x", guid, 0, desired), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "running", lambda: listener.crashed)
    pid = executor.pid_of(guid)
    assert pid is not None
    status = Path(f"/proc/{pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    return listener.running[0][1][0].host_port, uid


async def output(session: ExecSession) -> dict[int, bytes]:
    seen = {STDOUT: b"", STDERR: b""}
    while (chunk := await asyncio.wait_for(session.read(), DEADLINE_S)) is not None:
        seen[chunk[0]] += chunk[1]
    return seen


async def test_a_command_runs_as_the_instance_with_pipes(executor: ProcessExecutor) -> None:
    with pytest.raises(ExecRefused, match="not running"):
        await executor.open_exec("inst-1", ["true"], False, 24, 80)
    port, uid = await running(executor)
    script = "cat; echo $PORT $GREETING $(id -u) $(pwd); echo err >&2; exit 4"
    session = await executor.open_exec("inst-1", ["sh", "-c", script], False, 24, 80)
    try:
        await session.write(b"from stdin\n")
        session.close_stdin()
        seen = await output(session)
        assert await session.wait() == 4
    finally:
        await session.close()
    directory = executor.containers_dir / "inst-1"
    assert seen == {STDOUT: f"from stdin\n{port} hi {uid} {directory}\n".encode(), STDERR: b"err\n"}, seen
    with pytest.raises(ExecRefused, match="not found"):
        await executor.open_exec("inst-1", ["no-such-program-here"], False, 24, 80)


async def until(session: ExecSession, marker: bytes) -> bytes:
    """The terminal's output up to and including `marker` (typed input is echoed: a marker is computed by
    the shell, `m$((1+1))`, so that its echo does not count)."""
    seen = b""
    while marker not in seen:
        chunk = await asyncio.wait_for(session.read(), DEADLINE_S)
        assert chunk is not None, f"the terminal closed before {marker!r}: {seen!r}"
        seen += chunk[1]
    return seen


def sleeping(argument: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == b"sleep\0" + argument + b"\0":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_a_command_with_a_terminal_sees_its_size_and_ctrl_c(executor: ProcessExecutor) -> None:
    await running(executor)
    session = await executor.open_exec("inst-1", ["sh"], True, 10, 50)
    try:
        await session.write(b"stty size; echo m$((0+1))\n")
        assert b"10 50" in await until(session, b"m1")
        session.resize(12, 60)
        await session.write(b"stty size; echo m$((1+1))\n")
        assert b"12 60" in await until(session, b"m2")
        await session.write(b"sleep 1013\n")
        await eventually(lambda: bool(sleeping(b"1013")), DEADLINE_S, "sleep 1013 running", lambda: None)
        pids = sleeping(b"1013")
        await session.write(b"\x03")  # the terminal's interrupt: the sleep ends, the shell goes on
        await eventually(lambda: not any(pid_alive(pid) for pid in pids), DEADLINE_S, "the sleep interrupted",
                         lambda: pids)
        await session.write(b"echo after-$((1+1)); exit 5\n")
        assert b"after-2" in (await output(session))[STDOUT]
        assert await session.wait() == 5
    finally:
        await session.close()


async def test_the_command_dies_with_its_session_and_with_its_instance(executor: ProcessExecutor) -> None:
    await running(executor)
    pids = []
    for _ in range(2):
        script = "echo $$; sleep 1017 & wait"
        session = await executor.open_exec("inst-1", ["sh", "-c", script], False, 24, 80)
        chunk = await asyncio.wait_for(session.read(), DEADLINE_S)
        assert chunk is not None
        pids.append((session, int(chunk[1])))
    first, first_pid = pids[0]
    await eventually(lambda: len(sleeping(b"1017")) == 2, DEADLINE_S, "two sleeps", lambda: sleeping(b"1017"))
    await first.close()  # the connection dropped: the whole session killed, the background sleep too
    assert not pid_alive(first_pid)
    await eventually(lambda: len(sleeping(b"1017")) == 1, DEADLINE_S, "the first session's sleep killed",
                     lambda: sleeping(b"1017"))
    second, second_pid = pids[1]
    await executor.stop_lrp("inst-1")
    await eventually(lambda: not pid_alive(second_pid) and not sleeping(b"1017"), DEADLINE_S,
                     "the exec'd shell and its sleep killed with their instance", lambda: sleeping(b"1017"))
    assert await asyncio.wait_for(output(second), DEADLINE_S) is not None
    await second.close()


async def test_the_sim_executor_refuses_exec() -> None:
    with pytest.raises(ExecRefused, match="simulated"):
        await SimExecutor().open_exec("any", ["sh"], True, 24, 80)
