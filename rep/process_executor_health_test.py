"""The process executor's continuous health checks with real child processes on loopback, isolated (as root,
where the machine has the cgroup controllers) and with `--isolation none`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.models import DesiredLRP, HealthCheck, ModificationTag
from common.procutil import app_python, pid_alive
from tests.support.executor_listener import Listener
from tests.support.health_apps import STOPS_ANSWERING
from tests.support.polling import eventually

from .executor import LRPContainer
from .health_monitor import HealthMonitor
from .isolation import isolation_problem, prepare_isolation
from .process_executor import ProcessExecutor
from .settings import RepSettings

pytestmark = pytest.mark.timeout(120)

NOW = datetime(2024, 1, 1, tzinfo=UTC)
DEADLINE_S = 30.0  # child Pythons start slowly on a busy 2-core machine
PYTHON = app_python()


def container(check: HealthCheck, env: dict[str, str], guid: str = "inst-1") -> LRPContainer:
    desired = DesiredLRP(process_guid="web", command=[PYTHON, "-c", STOPS_ANSWERING], env=env, ports=[8080],
                         health_check=check, created_at=NOW, modification_tag=ModificationTag(epoch="e"))
    return LRPContainer(cell_id="cell-p", instance_guid=guid, index=0, desired=desired)


@pytest.fixture(params=["cgroups", "none"])
async def executor(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    isolation = None
    if request.param == "cgroups":
        rep = RepSettings(data_dir=tmp_path)
        problem = isolation_problem(rep)
        if problem is not None:
            pytest.skip(problem)
        isolation = prepare_isolation(rep)
    ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation, stop_grace_s=0.5, process_grace_s=0.3,
                         health=HealthMonitor())
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()
    await ex.health.close()


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "reason"), [
    ("port", "health check failed: port 8080: connection refused"),
    ("http", "health check failed: http GET /ready on port 8080: connection refused"),
])
async def test_an_instance_that_stops_answering_is_stopped_and_crashed_with_what_failed(
    executor: ProcessExecutor, kind: str, reason: str
) -> None:
    listener = Listener()
    check = HealthCheck(type=kind, path="/ready", timeout_s=DEADLINE_S,  # type: ignore[arg-type]
                        interval_s=0.2, invocation_timeout_s=1, failure_threshold=3)
    executor.start_lrp(container(check, {"ANSWER_FOR_S": "1.5"}), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)
    pid = executor.pid_of("inst-1")
    assert pid is not None
    assert listener.crashed == [], "healthy while it answers"

    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: executor.health)
    assert listener.crashed == [("inst-1", reason)]
    assert not pid_alive(pid), "stopped"
    assert len(executor.health) == 0, "no longer watched"
    log = (executor.containers_dir / "inst-1" / "output.log").read_text()
    assert "stopped answering" in log, "the crashed instance's log is kept"


@pytest.mark.slow
async def test_an_instance_that_answers_is_checked_and_left_running(executor: ProcessExecutor) -> None:
    listener = Listener()
    check = HealthCheck(type="http", timeout_s=DEADLINE_S, interval_s=0.1, failure_threshold=1)
    executor.start_lrp(container(check, {}), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "a running report", lambda: listener.crashed)
    await eventually(lambda: executor.health.checks >= 20, DEADLINE_S, "twenty checks",
                     lambda: (executor.health.checks, listener.crashed))
    assert listener.crashed == []
    pid = executor.pid_of("inst-1")
    assert pid is not None and pid_alive(pid)

    await executor.stop_lrp("inst-1")
    assert len(executor.health) == 0, "a stopped instance is no longer watched"
    assert listener.crashed == []


async def test_an_instance_that_exits_reports_its_exit_not_its_health(executor: ProcessExecutor) -> None:
    listener = Listener()
    check = HealthCheck(type="process", timeout_s=DEADLINE_S, interval_s=0.1)
    exits = container(check, {})
    script = "import time; time.sleep(0.8); raise SystemExit(3)"
    exits = exits._replace(desired=exits.desired.model_copy(update={"command": [PYTHON, "-c", script]}))
    executor.start_lrp(exits, listener)
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash report", lambda: listener.running)
    assert listener.running and listener.crashed == [("inst-1", "exited with status 3")]
