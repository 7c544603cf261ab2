"""Artifacts given to real child processes by the process executor, through the host's cache, isolated (as
root, where the machine has the cgroup controllers) and with `--isolation none`."""

from __future__ import annotations

import io
import tarfile
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from common.models import DesiredLRP, HealthCheck, ModificationTag, Task
from common.models.artifact import Artifact
from tests.support.artifact_server import Files, digest, serve_files
from tests.support.executor_listener import Listener
from tests.support.polling import eventually

from .artifact_cache import ArtifactCache
from .executor import LRPContainer, TaskContainer
from .isolation import isolation_problem, prepare_isolation
from .process_executor import ProcessExecutor
from .settings import RepSettings

pytestmark = pytest.mark.timeout(120)

NOW = datetime(2024, 1, 1, tzinfo=UTC)
DEADLINE_S = 30.0
SCRIPT = (b"#!/bin/sh\ncat app/lib/data.txt\necho changed > app/lib/data.txt && echo WROTE\n"
          b"echo new > app/lib/mine && echo ADDED\n")


def app_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data, mode in (("run.sh", SCRIPT, 0o755), ("lib/data.txt", b"original\n", 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def files() -> Iterator[Files]:
    with serve_files() as state:
        yield state


@pytest.fixture(params=["cgroups", "none"])
async def executor(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProcessExecutor]:
    isolation = None
    if request.param == "cgroups":
        rep = RepSettings(data_dir=tmp_path)
        if (problem := isolation_problem(rep)) is not None:
            pytest.skip(problem)
        isolation = prepare_isolation(rep)
    cache = ArtifactCache(tmp_path / "cache", 64 << 20)
    ex = ProcessExecutor(tmp_path, "cell-p", isolation=isolation, stop_grace_s=0.5, process_grace_s=0.3,
                         artifacts=cache)
    await ex.open()
    yield ex
    ex.kill_all()
    await ex.close()


def task(guid: str, artifacts: list[Artifact]) -> TaskContainer:
    return TaskContainer("cell-p", Task(task_guid=guid, command=["sh", "./app/run.sh"], created_at=NOW,
                                        updated_at=NOW, artifacts=artifacts))


async def test_a_task_runs_a_script_from_its_artifact_and_cannot_change_the_cached_copy(
        executor: ProcessExecutor, files: Files) -> None:
    data = app_tar()
    art = Artifact(digest=digest(data), url=files.add("/app.tgz", data), dest="app")
    listener = Listener()
    for guid in ("t1", "t2"):
        executor.run_task(task(guid, [art]), listener)
    await eventually(lambda: len(listener.finished) == 2, DEADLINE_S, "two task completions",
                     lambda: listener.finished)
    assert files.gets == {"/app.tgz": 1}, "one download for the host"
    for done in listener.finished:
        assert done.result.startswith("original\n"), done
        if executor.isolation is not None:  # the instance's own uid: the cached files are root's, 0444
            assert "WROTE" not in done.result, done.result
            if executor._disks is not None:  # a filesystem of its own: a read-only bind mount of the tree
                assert "Read-only file system" in done.result and "ADDED" not in done.result, done.result
            else:  # hard links, in directories of its own
                assert "ADDED" in done.result, done.result
    assert executor.artifacts is not None
    cached = executor.artifacts.path_of(art.digest) / "lib" / "data.txt"
    assert cached.read_bytes() == b"original\n", "the cached copy is unchanged"


async def test_a_digest_mismatch_fails_the_task_naming_the_artifact(executor: ProcessExecutor,
                                                                    files: Files) -> None:
    art = Artifact(digest=digest(b"promised"), url=files.add("/app.tgz", b"delivered"), dest="app")
    listener = Listener()
    executor.run_task(task("t1", [art]), listener)
    await eventually(lambda: bool(listener.finished), DEADLINE_S, "a task completion", lambda: None)
    (done,) = listener.finished
    assert done.failed and done.failure_reason == (
        f"artifact {art.digest[:11]}… from {files.base}/app.tgz: digest mismatch "
        f"(got {digest(b'delivered')[:19]}…)"), done


async def test_an_unreachable_artifact_crashes_the_lrp_naming_it(executor: ProcessExecutor) -> None:
    art = Artifact(digest=digest(b"x"), url="http://127.0.0.1:9/app.tgz", dest="app")
    desired = DesiredLRP(process_guid="web", command=["sh", "./app/run.sh"], ports=[],
                         health_check=HealthCheck(type="process", timeout_s=DEADLINE_S), created_at=NOW,
                         modification_tag=ModificationTag(epoch="e"), artifacts=[art])
    listener = Listener()
    executor.start_lrp(LRPContainer(cell_id="cell-p", instance_guid="i1", index=0, desired=desired), listener)
    await eventually(lambda: bool(listener.crashed), DEADLINE_S, "a crash", lambda: listener.running)
    ((guid, reason),) = listener.crashed
    assert guid == "i1"
    where = "http://127.0.0.1:9/app.tgz"
    assert reason.startswith(f"artifact {art.digest[:11]}… from {where}: unreachable ("), reason


async def test_an_lrp_gets_its_artifact_mounted_and_unmounted_at_stop(executor: ProcessExecutor,
                                                                      files: Files) -> None:
    """Where each instance's directory is a filesystem of its own: one read-only bind mount per artifact,
    gone when the instance stops, and the blob unpinned only then."""
    if executor._disks is None:
        pytest.skip("the instances' directories are not filesystems of their own here")
    from .disk_quota import mounts_under

    data = app_tar()
    art = Artifact(digest=digest(data), url=files.add("/app.tgz", data), dest="app")
    desired = DesiredLRP(process_guid="web", command=["sleep", "60"], ports=[],
                         health_check=HealthCheck(type="process", timeout_s=DEADLINE_S), created_at=NOW,
                         modification_tag=ModificationTag(epoch="e"), artifacts=[art])
    listener = Listener()
    executor.start_lrp(LRPContainer(cell_id="cell-p", instance_guid="i1", index=0, desired=desired), listener)
    await eventually(lambda: bool(listener.running), DEADLINE_S, "the instance running",
                     lambda: listener.crashed)
    directory = executor.containers_dir / "i1"
    assert mounts_under(directory) == [directory / "app"], mounts_under(executor.containers_dir)
    assert (directory / "app" / "lib" / "data.txt").read_bytes() == b"original\n"
    await executor.stop_lrp("i1")
    assert mounts_under(executor.containers_dir) == [], "nothing left mounted"
    assert executor.artifacts is not None
    executor.artifacts.evict(art.digest)  # unpinned: evictable
    assert executor.artifacts.held() == []
