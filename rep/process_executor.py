"""Real child processes as containers, isolated as rep/isolation.py describes.

Each container is a directory (tasks: `task-<task_guid>`): isolated, `<instances-dir>/<rep-key>/<cell_id>/
<instance_guid>`, 0700 and owned by the instance's own uid; with `--isolation none`,
`<data-dir>/<cell_id>/containers/<instance_guid>`. It holds `output.log` and `output.log.1` (stdout and
stderr through pipes the rep reads, as timestamped records, capped and rotated: rep/output_log.py; served
through rep/instance_logs.py), `tmp/`, and unisolated `pid`
(pid and kernel start time). Its disk_mb covers the whole directory, logs included. Isolated where the
host allows loop mounts (rep/disk_quota.py), the directory is a filesystem of disk_mb of its own: a write
past it fails with ENOSPC and the instance runs on. Elsewhere it is measured (rep/disk_usage.py) every
`disk_check_interval_s` and on exit; over it, the instance is stopped as a stop would and reported crashed
with "disk quota exceeded (N MB used of M MB)" (a task: failed with that reason). The child:
- runs `desired.command` (argv, no shell) in that directory with exactly this environment: PATH (a
  standard one, unless the LRP sets its own), the LRP's `env`, then Vendue's own variables: PORT (host
  port of the first container port; every container port gets a free host port), INSTANCE_INDEX,
  INSTANCE_GUID, PROCESS_GUID, CELL_ID (tasks: TASK_GUID, CELL_ID), HOME (its directory) and TMPDIR (its
  tmp/). Nothing of the rep's own environment (its settings, its NATS credentials), with
  `--isolation none` neither;
- isolated: runs in its own cgroup and under its own uid, both entered before exec
  (common/procutil.child_preexec), so that stop, delete and crash kill everything it started (setsid,
  double forks and new process groups included), and a rep that starts after a crash kills what its cgroups
  still hold. An instance whose main process died after the OOM killer struck in its cgroup crashed with
  "out of memory (killed by signal 9)" (its exit status in brackets);
- unisolated: leads its own process group (stop signals go to the whole group) and gets
  PR_SET_PDEATHSIG(SIGKILL), so `kill -9` of the rep takes it down too. Grandchildren do not inherit
  PDEATHSIG: a command that forks and does not `exec` leaves them behind until the rep restarts and kills
  its leftovers (every process still in a recorded process group that carries the container's guid in its
  environment). Memory: RLIMIT_DATA = memory_mb (heap and private writable mappings, Linux >= 4.7).
  RLIMIT_AS would break runtimes that reserve large address ranges (Python, Go, the JVM). Thread stacks
  count against RLIMIT_DATA, so very thread-heavy apps need more memory_mb. `--no-memory-limit` turns it
  off.

An instance is RUNNING once its health check passes within `health_check.timeout_s`: `port` (a TCP
connect to 127.0.0.1:PORT; with no ports it degrades to `process`), `http` (GET path answers 2xx or 3xx),
`process` (still alive after a short grace). A child that exits, or never turns healthy, is a crash:
"exited with status N" / "killed by signal N" / "health check (port) did not pass within 60s". Once
RUNNING, the rep's health monitor (rep/health_monitor.py) checks it every `interval_s` for its whole life;
failing `failure_threshold` times in a row, it is stopped as a stop would and reported crashed with
"health check failed: port 8080: connection refused".
Stop: SIGTERM to every process of the instance (its cgroup; unisolated its process group), SIGKILL after
the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG

from structlog.contextvars import bind_contextvars

from common.models import HealthCheck, PortMapping, TaskCompletion
from common.models.artifact import Artifact
from common.procutil import free_port, signal_process, terminate_then_kill_async

from .app_users import AppUser, NoAppUser
from .artifact_cache import ArtifactCache, ArtifactError, describe, unbind
from .cgroups import CellCgroups, limits_for
from .disk_quota import DISKS, DiskQuotaError, LoopDisks, sweep_loop_disks
from .disk_usage import DiskWatcher, tree_bytes
from .exec_session import ProcessExecSession
from .executor import ExecRefused, ExecSession, Executor, ExecutorListener, LRPContainer, TaskContainer
from .health_monitor import HealthMonitor, Target, check_once
from .instance_logs import LogBook
from .isolation import TMP, Isolation, Sandbox, disown_instance_dir, make_instance_dir
from .log_stream import Origin
from .output_log import LOG_NAMES, OutputLog
from .start_failure import program_not_started
from .usage import InstanceUsage, UsageBook, Watched
from .usage import Limits as UsageLimits

log = logging.getLogger("rep.process")

MIB = 1024 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
RESULT_BYTES = 4096
PID_NAME = "pid"
# How long an ended container's output may take to drain: every process holding the pipe is gone by then,
# but for one that escaped the kill (which then gets EPIPE).
OUTPUT_DRAIN_S = 1.0
USAGE_INTERVAL_S = 5.0  # how often every instance's memory, CPU and disk use is read (rep/usage.py)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A start that fails on the way (no uid left, a cgroup or a directory not made, exec refused) is the
# instance's failure to start, not the executor's.
START_ERRORS = (OSError, subprocess.SubprocessError, NoAppUser)


@dataclass(slots=True, eq=False)
class _Child:
    """One container's process, what it runs in, and the request to stop it."""

    guid: str
    sandbox: Sandbox
    proc: asyncio.subprocess.Process | None = None
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    output: OutputLog | None = None
    over_quota: str = ""  # the disk watcher's verdict, once it has stopped the container
    health_failure: str = ""  # the health monitor's verdict, once it has stopped the container
    env: dict[str, str] = field(default_factory=dict)  # what its command got, for `vendue exec`
    running: bool = False  # reported RUNNING (its health check passed), until it stops
    execs: set[ProcessExecSession] = field(default_factory=set)  # commands run in it (`vendue exec`)

    async def close_output(self) -> None:
        if self.output is not None:
            await self.output.finish(OUTPUT_DRAIN_S)
            self.output.close()

    @property
    def directory(self) -> Path:
        return self.sandbox.directory


def _rss_bytes(pid: int | None) -> int:
    """Resident memory of one process (VmRSS of /proc/<pid>/status), 0 when gone."""
    if pid is None:
        return 0
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def exit_reason(returncode: int) -> str:
    if returncode < 0:
        return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a process (field 22 of /proc/<pid>/stat): tells pid reuse apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


class ProcessExecutor(Executor):
    logs: LogBook

    def __init__(
        self,
        data_dir: Path,
        cell_id: str,
        *,
        isolation: Isolation | None = None,
        stop_grace_s: float = 10.0,
        memory_limit: bool = True,
        process_grace_s: float = 1.0,
        log_cap_bytes: int = 10 * MIB,
        disk_check_interval_s: float = 2.0,
        usage_interval_s: float = USAGE_INTERVAL_S,
        artifacts: ArtifactCache | None = None,
        health: HealthMonitor | None = None,
    ) -> None:
        self.isolation = isolation  # None: --isolation none
        self.artifacts = artifacts  # the host's cache, shared by its cells (rep/artifact_cache.py)
        self._cgroups: CellCgroups | None = None
        self._disks: LoopDisks | None = isolation.disks if isolation is not None else None
        self._images = Path(data_dir) / DISKS / cell_id  # the images of its instances' filesystems
        if isolation is not None:
            self.containers_dir = isolation.instances_dir(cell_id)
            self._cgroups = isolation.cgroups.cell(cell_id)
        else:
            self.containers_dir = Path(data_dir) / cell_id / "containers"
        self.cell_id = cell_id
        self.stop_grace_s = stop_grace_s
        self.memory_limit = memory_limit  # RLIMIT_DATA, unisolated only: a cgroup limits memory otherwise
        self.process_grace_s = process_grace_s
        self.log_cap_bytes = log_cap_bytes
        self._disk = DiskWatcher(disk_check_interval_s)
        self.usage_book = UsageBook()
        self._usage_interval_s = usage_interval_s
        self._usage_runner: asyncio.Task[None] | None = None
        self._quota_stops: set[asyncio.Task[None]] = set()
        self._lrps: dict[str, _Child] = {}
        self._tasks: dict[str, _Child] = {}
        # The rep's one monitor, shared by its cells (rep/main.py); a cell of its own gets its own.
        self._own_health = health is None
        self.health = health or HealthMonitor()
        self.logs = LogBook()

    @property
    def isolation_name(self) -> str:
        """As the cell advertises it: cgroup-v1 or cgroup-v2 with disk:ext4 or disk:poll, or none."""
        return self.isolation.name if self.isolation is not None else "none"

    async def open(self) -> None:
        self._disk.start()
        self._usage_runner = asyncio.create_task(self._sample_usage(), name="usage-sampler")
        if self.isolation is None or self._cgroups is None:
            self.containers_dir.mkdir(parents=True, exist_ok=True)
            killed = kill_leftovers(self.containers_dir)
            if killed:
                log.info("killed leftover container processes", extra={"data": {"pids": killed}})
            return
        self.isolation.open_cell(self.cell_id)
        # What a previous run of this rep left (it was killed): every process in those cgroups, then them.
        leftovers = self._cgroups.leftovers()
        for cgroup in leftovers:
            await cgroup.kill()
        # Then their filesystems (nothing holds them now), whether or not this run makes any.
        found = await asyncio.to_thread(sweep_loop_disks, self.containers_dir, self._images)
        if found:
            log.info("unmounted and deleted what a previous run left", extra={"data": {"left": found}})
        for directory in self.containers_dir.iterdir():
            shutil.rmtree(directory, ignore_errors=True)
        if leftovers:
            log.info("killed what a previous run left in its cgroups",
                     extra={"data": {"cgroups": [str(c.dirs[0]) for c in leftovers]}})

    async def close(self) -> None:
        children = list(self._lrps.values()) + list(self._tasks.values())
        for child in children:
            child.stop_requested.set()
        runners = [c.runner for c in children if c.runner is not None]
        if runners:
            await asyncio.wait(runners, timeout=self.stop_grace_s + 5)
        await self._disk.stop()
        if self._usage_runner is not None:
            self._usage_runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._usage_runner
        if self._own_health:
            await self.health.close()
        self.logs.forget_all()
        if self._cgroups is not None:
            if self._disks is not None:  # an instance that outlived the grace still has its filesystem
                await asyncio.to_thread(sweep_loop_disks, self.containers_dir, self._images)
            # Outside the data dir, on a machine other reps share: nothing of this cell stays behind, not
            # even the logs of crashed instances (kept while the rep runs).
            shutil.rmtree(self.containers_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                self.containers_dir.parent.rmdir()  # <rep-key>, once its last cell is gone
            self._cgroups.remove()

    def kill_all(self) -> None:
        for child in list(self._lrps.values()) + list(self._tasks.values()):
            child.stop_requested.set()
            self._kill_now(child)

    def pid_of(self, instance_guid: str) -> int | None:
        child = self._lrps.get(instance_guid)
        return child.proc.pid if child is not None and child.proc is not None else None

    # --- LRPs ---------------------------------------------------------------------------------------

    def start_lrp(self, container: LRPContainer, listener: ExecutorListener) -> None:
        child = _Child(container.instance_guid, Sandbox(self.containers_dir / container.instance_guid))
        self._lrps[child.guid] = child
        child.runner = asyncio.create_task(
            self._run_lrp(child, container, listener), name=f"lrp-{child.guid}"
        )

    async def stop_lrp(self, instance_guid: str) -> None:
        child = self._lrps.get(instance_guid)
        if child is None:
            return
        child.stop_requested.set()
        if child.runner is not None:
            await asyncio.shield(child.runner)

    async def _run_lrp(self, child: _Child, c: LRPContainer, listener: ExecutorListener) -> None:
        # This task's own copy of the log context: every line it logs names the instance.
        bind_contextvars(process_guid=c.process_guid, index=c.index, cell_id=c.cell_id,
                         instance_guid=child.guid)
        keep_directory = False
        try:
            desired = c.desired
            if not desired.command:
                listener.lrp_crashed(child.guid, "failed to start: the desired LRP has no command")
                return
            ports, port_env = self._lrp_ports(c)
            own = {
                "INSTANCE_INDEX": str(c.index),
                "INSTANCE_GUID": c.instance_guid,
                "PROCESS_GUID": desired.process_guid,
                "CELL_ID": c.cell_id,
            }
            if port_env is not None:
                own["PORT"] = port_env
            try:
                await self._isolate(child, desired.memory_mb, desired.disk_mb)
                await self._place_artifacts(child, desired.artifacts)
                origin = Origin(child.guid, c.cell_id, desired.process_guid, c.index)
                child.env = self._env(child, desired.env, own)
                proc = await self._spawn(child, desired.command, child.env, origin)
            except ArtifactError as exc:
                listener.lrp_crashed(child.guid, str(exc))
                return
            except START_ERRORS as exc:
                listener.lrp_crashed(child.guid, f"failed to start: {exc}")
                return
            self._watch_disk(child, desired.disk_mb)
            self._watch_usage(child, c, desired.memory_mb, desired.disk_mb)
            if child.stop_requested.is_set():
                await self._terminate(child, proc, self.stop_grace_s)
                return
            try:
                healthy = await self._wait_healthy(child, proc, desired.health_check, ports)
            except START_ERRORS as exc:  # what the start made beside the process failed (a port mapping)
                keep_directory = True
                await self._terminate(child, proc, 0.5)
                listener.lrp_crashed(child.guid, f"failed to start: {exc}")
                return
            if child.stop_requested.is_set():
                await self._terminate(child, proc, self.stop_grace_s)
                return
            if proc.returncode is not None:
                keep_directory = True
                listener.lrp_crashed(child.guid, await self._exited(child, proc.returncode))
                return
            if not healthy:
                keep_directory = True
                await self._terminate(child, proc, 0.5)
                check = desired.health_check
                listener.lrp_crashed(
                    child.guid, f"health check ({check.type}) did not pass within {check.timeout_s:g}s"
                )
                return
            listener.lrp_running(child.guid, ports)
            child.running = True
            log.info("instance running",
                     extra={"data": {"pid": proc.pid, "ports": [p.host_port for p in ports]}})
            check = desired.health_check
            self.health.watch(child.guid, check, self._target(child, check, ports, proc),
                              lambda reason: self._stop_unhealthy(child, reason))
            if await _exited_or_stop(proc, child.stop_requested):
                keep_directory = True
                reason = await self._exited(child, proc.returncode or 0)
                log.info("instance exited", extra={"data": {"reason": reason}})
                listener.lrp_crashed(child.guid, reason)
            else:
                await self._terminate(child, proc, self.stop_grace_s)
                log.info("instance stopped")
        except Exception as exc:
            log.exception("container failed", extra={"data": {"instance_guid": child.guid}})
            self._kill_now(child)
            listener.lrp_crashed(child.guid, f"executor error: {exc!r}")
        finally:
            child.running = False
            self.health.unwatch(child.guid)
            self._lrps.pop(child.guid, None)
            for session in list(child.execs):  # its cgroup's kill took them when isolated; unisolated not
                await session.close()
            await self._release(child, keep_log=keep_directory)

    def _lrp_ports(self, c: LRPContainer) -> tuple[list[PortMapping], str | None]:
        """Every container port with a free host port, and $PORT: here the first one's host port (the
        process listens on the host itself)."""
        ports = [PortMapping(container_port=p, host_port=free_port()) for p in c.desired.ports]
        return ports, str(ports[0].host_port) if ports else None

    async def _wait_healthy(
        self, child: _Child, proc: asyncio.subprocess.Process, check: HealthCheck, ports: list[PortMapping]
    ) -> bool:
        """Poll the health check until it passes, the child exits, a stop comes, or the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + check.timeout_s
        target = self._target(child, check, ports, proc)
        started = loop.time()
        interval = 0.02
        while True:
            if proc.returncode is not None or child.stop_requested.is_set():
                return False
            if target.kind == "process":
                if loop.time() - started >= min(self.process_grace_s, check.timeout_s / 2):
                    return True
            else:
                budget = max(0.05, min(check.invocation_timeout_s, deadline - loop.time()))
                if await check_once(target, budget) is None:
                    return proc.returncode is None
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            # Sleep, but wake at once when the child exits or a stop is requested.
            waiters = [asyncio.ensure_future(proc.wait()), asyncio.ensure_future(child.stop_requested.wait())]
            _, pending = await asyncio.wait(
                waiters, timeout=min(interval, remaining), return_when="FIRST_COMPLETED"
            )
            for w in pending:
                w.cancel()
            interval = min(interval * 1.5, 0.25)

    def _check_address(self, child: _Child) -> str | None:
        """Where `child`'s health checks connect, at its container port; None: the host's loopback at its
        host port (a process listens on the host itself)."""
        return None

    def _target(self, child: _Child, check: HealthCheck, ports: list[PortMapping],
                proc: asyncio.subprocess.Process) -> Target:
        return Target.of(check, [(p.container_port, p.host_port) for p in ports],
                         lambda: proc.returncode is None, address=self._check_address(child))

    def _stop_unhealthy(self, child: _Child, reason: str) -> None:
        """The health monitor's verdict: stop the instance as a stop would; its runner then sees it end and
        reports the crash with the reason. An instance that has already exited reports its exit instead."""
        if child.proc is None or child.proc.returncode is not None:
            return
        if child.stop_requested.is_set():  # being stopped anyway: a stop, not a crash
            return
        log.info("health check failed", extra={"data": {"reason": reason}})
        child.health_failure = f"health check failed: {reason}"
        stop = asyncio.create_task(self._terminate(child, child.proc, self.stop_grace_s))
        self._quota_stops.add(stop)
        stop.add_done_callback(self._quota_stops.discard)

    # --- tasks --------------------------------------------------------------------------------------

    def run_task(self, container: TaskContainer, listener: ExecutorListener) -> None:
        guid = container.task_guid
        child = _Child(guid, Sandbox(self.containers_dir / f"task-{guid}"))
        self._tasks[guid] = child
        child.runner = asyncio.create_task(self._run_task(child, container, listener), name=f"task-{guid}")

    async def cancel_task(self, task_guid: str) -> None:
        child = self._tasks.get(task_guid)
        if child is None:
            return
        child.stop_requested.set()
        if child.runner is not None:
            await asyncio.shield(child.runner)

    async def _run_task(self, child: _Child, c: TaskContainer, listener: ExecutorListener) -> None:
        task = c.task
        bind_contextvars(task_guid=task.task_guid, cell_id=c.cell_id)  # as _run_lrp: this task's lines
        try:
            try:
                await self._isolate(child, task.memory_mb, task.disk_mb)
                env = self._env(child, task.env, {"TASK_GUID": task.task_guid, "CELL_ID": c.cell_id})
                await self._place_artifacts(child, task.artifacts)
                proc = await self._spawn(child, task.command, env, Origin(task.task_guid, c.cell_id))
            except ArtifactError as exc:
                listener.task_finished(
                    TaskCompletion(task_guid=task.task_guid, failed=True, failure_reason=str(exc))
                )
                return
            except START_ERRORS as exc:
                listener.task_finished(
                    TaskCompletion(
                        task_guid=task.task_guid, failed=True, failure_reason=f"failed to start: {exc}"
                    )
                )
                return
            self._watch_disk(child, task.disk_mb)
            if not await _exited_or_stop(proc, child.stop_requested):
                await self._terminate(child, proc, self.stop_grace_s)
                return  # cancelled: the cell reports it
            status = proc.returncode or 0
            reason = await self._exited(child, status)
            failed = status != 0 or bool(child.over_quota)
            assert child.output is not None
            await child.output.finish(OUTPUT_DRAIN_S)
            listener.task_finished(
                TaskCompletion(
                    task_guid=task.task_guid,
                    failed=failed,
                    failure_reason=reason if failed else "",
                    exit_status=status,
                    result=child.output.tail(RESULT_BYTES),
                )
            )
        except Exception as exc:
            log.exception("task failed in the executor", extra={"data": {"task_guid": task.task_guid}})
            self._kill_now(child)
            listener.task_finished(
                TaskCompletion(
                    task_guid=task.task_guid, failed=True, failure_reason=f"executor error: {exc!r}"
                )
            )
        finally:
            self._tasks.pop(child.guid, None)
            await self._release(child, keep_log=False)

    # --- exec ---------------------------------------------------------------------------------------

    async def open_exec(self, instance_guid: str, argv: list[str], tty: bool, rows: int,
                        cols: int) -> ExecSession:
        """`argv` as the instance's command runs: its sandbox's preexec (cgroup, uid and gid), its
        directory, its environment (rep/exec_session.py). Killed when the instance stops."""
        child = self._lrps.get(instance_guid)
        if child is None or not child.running or child.proc is None or child.proc.returncode is not None:
            raise ExecRefused(f"instance {instance_guid} is not running on cell {self.cell_id}")
        try:
            session = await ProcessExecSession.start(
                argv, cwd=child.directory, env=child.env, preexec=child.sandbox.preexec(), tty=tty,
                rows=rows, cols=cols)
        except OSError as exc:
            raise ExecRefused(str(program_not_started(exc, argv, child.directory))) from None
        except subprocess.SubprocessError as exc:
            raise ExecRefused(f"could not enter the instance: {exc}") from None
        if not child.running:  # it stopped while the command started
            await session.close()
            raise ExecRefused(f"instance {instance_guid} stopped")
        child.execs.add(session)
        session.on_close = lambda: child.execs.discard(session)
        return session

    # --- isolation ----------------------------------------------------------------------------------

    async def _isolate(self, child: _Child, memory_mb: int, disk_mb: int) -> None:
        """Give the container its user, its cgroup and its directory, a filesystem of disk_mb where the
        host allows (undone by `_release`)."""
        sandbox = child.sandbox
        if self.isolation is None or self._cgroups is None:
            sandbox.data_limit_bytes = memory_mb * MIB if self.memory_limit else None
            make_instance_dir(sandbox.directory, None)
            return
        sandbox.user = self.isolation.users.acquire()
        sandbox.cgroup = self._cgroups.create(child.guid, limits_for(memory_mb, self.isolation.pids_limit))
        if self._disks is None:
            make_instance_dir(sandbox.directory, sandbox.user)
            return
        image = self._disks.image_of(self.cell_id, child.guid)
        # mkfs and mount are processes of their own (~20 ms): off the event loop.
        sandbox.under_fd = await asyncio.to_thread(
            _make_disk_dir, self._disks, image, sandbox.directory, disk_mb, sandbox.user)
        sandbox.disk_image = image

    def _env(self, child: _Child, requested: dict[str, str], own: dict[str, str]) -> dict[str, str]:
        """Exactly what the LRP or task asks for and Vendue's own variables (see the module's docstring)."""
        return {"PATH": DEFAULT_PATH, **requested, **own,
                "HOME": str(child.directory), "TMPDIR": str(child.directory / TMP)}

    async def _terminate(self, child: _Child, proc: asyncio.subprocess.Process, grace_s: float) -> None:
        """SIGTERM to every process of the container, SIGKILL after `grace_s`."""
        cgroup = child.sandbox.cgroup
        if cgroup is None:
            await terminate_then_kill_async(proc, grace_s, group=True)
            return
        await cgroup.stop(grace_s)
        await asyncio.wait_for(proc.wait(), timeout=30.0)

    async def _exited(self, child: _Child, returncode: int) -> str:
        """The main process ended on its own: kill what it left behind; say why it ended (over its disk
        quota, as the watcher found or as measured now, comes first: `child.over_quota` is then set)."""
        reason = exit_reason(returncode)
        cgroup = child.sandbox.cgroup
        if cgroup is None:
            if child.proc is not None:
                signal_process(child.proc.pid, signal.SIGKILL, group=True)  # what the leader left behind
        else:
            if cgroup.oom_kills() > 0:  # read before the cgroup goes
                reason = f"out of memory ({reason})"
            await cgroup.kill()
        child.over_quota = child.over_quota or await self._disk.check(child.guid)
        return child.over_quota or child.health_failure or reason

    def _kill_now(self, child: _Child) -> None:
        if child.sandbox.cgroup is not None:
            child.sandbox.cgroup.kill_now()
        elif child.proc is not None and child.proc.returncode is None:
            signal_process(child.proc.pid, signal.SIGKILL, group=True)

    async def _release(self, child: _Child, *, keep_log: bool) -> None:
        """Undo `_isolate`: the cgroup emptied and removed, the directory removed (a crashed one kept for its
        log, made root's), and only then the uid given back: nothing runs under it any more."""
        sandbox = child.sandbox
        self._disk.unwatch(child.guid)
        self.usage_book.unwatch(child.guid)
        emptied = True
        if sandbox.cgroup is not None:
            emptied = await sandbox.cgroup.kill()
            if self._cgroups is not None:
                self._cgroups.released(child.guid)
        await child.close_output()
        if sandbox.disk_image is not None:
            try:  # the artifacts' bind mounts, before the filesystem they sit on
                await asyncio.to_thread(unbind, sandbox.directory)
            except OSError as exc:  # its filesystem's unmount falls back to a lazy one, taking them too
                log.error("an instance's artifact mounts could not be unmounted",
                          extra={"data": {"dir": str(sandbox.directory), "error": str(exc)}})
        if self.artifacts is not None:  # only now may the cache evict what the instance had mounted
            self.artifacts.unpin(child.guid)
        self.logs.released(child.guid, kept=keep_log)
        if sandbox.disk_image is not None and self._disks is not None:
            await asyncio.to_thread(_remove_disk_dir, self._disks, sandbox.disk_image, sandbox.directory,
                                    sandbox.under_fd, keep_log)
            sandbox.disk_image, sandbox.under_fd = None, -1
            if keep_log and sandbox.user is not None:
                disown_instance_dir(sandbox.directory)
        elif not keep_log:
            shutil.rmtree(sandbox.directory, ignore_errors=True)
        else:
            _keep_only_logs(sandbox.directory)
            if sandbox.user is not None:
                disown_instance_dir(sandbox.directory)
        if sandbox.user is not None and self.isolation is not None:
            if emptied:
                self.isolation.users.release(sandbox.user)
            else:  # a process of it would not die: its uid stays taken rather than go to another instance
                log.error("uid kept: a process of the container would not die",
                          extra={"data": {"guid": child.guid, "uid": sandbox.user.uid}})

    # --- disk quota ---------------------------------------------------------------------------------

    def _watch_disk(self, child: _Child, disk_mb: int) -> None:
        if child.sandbox.disk_image is not None:
            return  # its filesystem enforces disk_mb: the instance gets ENOSPC and runs on
        self._disk.watch(
            child.guid, child.directory, disk_mb, lambda reason: self._stop_over_quota(child, reason)
        )

    def _stop_over_quota(self, child: _Child, reason: str) -> None:
        """The disk watcher's verdict: stop the container as a stop would; its runner then sees it end and
        reports the crash (or the task's failure) with `reason`."""
        child.over_quota = reason
        if child.proc is not None and child.proc.returncode is None:
            stop = asyncio.create_task(self._terminate(child, child.proc, self.stop_grace_s))
            self._quota_stops.add(stop)
            stop.add_done_callback(self._quota_stops.discard)

    # --- usage ---------------------------------------------------------------------------------------

    def usage(self) -> list[InstanceUsage]:
        return self.usage_book.usage()

    def _watch_usage(self, child: _Child, c: LRPContainer, memory_mb: int, disk_mb: int) -> None:
        sandbox = child.sandbox

        def read() -> tuple[int | None, int, int]:
            cgroup = sandbox.cgroup
            if sandbox.disk_image is not None:  # a filesystem of its own (no watcher): what is used of it
                st = os.statvfs(sandbox.directory)
                disk = (st.f_blocks - st.f_bfree) * st.f_frsize
            else:  # the watcher's last measurement, or one now when it has not measured it yet
                measured = self._disk.last_bytes(child.guid)
                disk = measured if measured is not None else tree_bytes(sandbox.directory)
            if cgroup is None:  # unisolated: no cgroup to read; the process's resident memory only
                return None, _rss_bytes(child.proc.pid if child.proc is not None else None), disk
            return cgroup.cpu_ns(), cgroup.memory_bytes(), disk

        self.usage_book.watch(child.guid, Watched(c.process_guid, c.index,
                                                  UsageLimits(memory_mb * MIB, disk_mb * MIB), read))

    async def _sample_usage(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.usage_book.sample_all)
            except Exception:
                log.exception("sampling the instances' usage failed")
            await asyncio.sleep(self._usage_interval_s)  # a period, not a synchronisation

    # --- artifacts ----------------------------------------------------------------------------------

    async def _place_artifacts(self, child: _Child, artifacts: list[Artifact]) -> None:
        """Fetch through the host's cache and place each artifact at its dest before the command runs;
        pinned for this instance until its release."""
        if not artifacts:
            return
        if self.artifacts is None:
            raise ArtifactError(f"{describe(artifacts[0])}: this rep has no artifact cache")
        user = child.sandbox.user
        owner = (user.uid, user.gid) if user is not None else None
        # A directory that is a filesystem of its own cannot take hard links to the cache: read-only bind
        # mounts, not a copy per instance (docs/artifacts.md, "The instance cannot change the cached copy").
        bind = child.sandbox.disk_image is not None
        await self.artifacts.place(child.guid, artifacts, child.sandbox.directory, owner, bind=bind)

    # --- spawning -----------------------------------------------------------------------------------

    async def _spawn(self, child: _Child, argv: list[str], env: dict[str, str],
                     origin: Origin) -> asyncio.subprocess.Process:
        """Start `argv` with `env` in the container's directory, inside its sandbox; its output is
        `origin`'s in the log book."""
        sandbox = child.sandbox
        output = OutputLog(sandbox.directory, self.log_cap_bytes)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=sandbox.directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output.writer,
                stderr=output.stderr_writer,
                start_new_session=True,
                preexec_fn=sandbox.preexec(),
            )
        except OSError as exc:
            output.close()
            raise program_not_started(exc, argv, sandbox.directory) from None
        except BaseException:
            output.close()
            raise
        output.start()
        child.output = output
        self.logs.started(origin, sandbox.directory, output)
        child.proc = proc
        if sandbox.cgroup is None:  # for kill_leftovers; an isolated instance's cgroup says all of that
            (sandbox.directory / PID_NAME).write_text(
                json.dumps({"pid": proc.pid, "start_time": _start_time(proc.pid), "guid": child.guid}) + "\n"
            )
        return proc


async def _exited_or_stop(proc: asyncio.subprocess.Process, stop: asyncio.Event) -> bool:
    """Wait for the child to exit (True) or for a stop request (False)."""
    exited = asyncio.ensure_future(proc.wait())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([exited, stopping], return_when="FIRST_COMPLETED")
    finally:
        exited.cancel()
        stopping.cancel()
    return proc.returncode is not None and not stop.is_set()


def _make_disk_dir(disks: LoopDisks, image: Path, directory: Path, disk_mb: int, user: AppUser) -> int:
    """An isolated instance's directory as a filesystem of its own (rep/disk_quota.py): the mount point
    made root's and 0700, the filesystem mounted on it, its root 0700 and the user's, with tmp/. Returns a
    descriptor of the mount point's own directory, under the mount (`_remove_disk_dir` keeps logs there)."""
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:  # a guid is never reused; what is there is a previous run's: start afresh
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o700)
    under = os.open(directory, _DIR_FLAGS)
    try:
        disks.attach(image, directory, disk_mb, user.uid, user.gid)
        try:
            directory.chmod(0o700)
            (directory / TMP).mkdir(mode=0o700)
            os.chown(directory / TMP, user.uid, user.gid)
        except BaseException:
            disks.detach(image, directory)
            raise
    except BaseException:
        os.close(under)
        raise
    return under


def _remove_disk_dir(disks: LoopDisks, image: Path, directory: Path, under: int, keep_log: bool) -> None:
    """Undo `_make_disk_dir`: unmounted, the image deleted, the directory removed; or (`keep_log`, a
    crash) the bare directory kept with the logs alone, copied beneath the mount first (through `under`),
    so that they are there throughout. Closes `under`."""
    try:
        if keep_log:
            for name in LOG_NAMES:
                with contextlib.suppress(OSError):
                    _copy_regular(directory / name, name, under)
        try:
            disks.detach(image, directory)
        except DiskQuotaError as exc:  # left mounted: close, or the next start, sweeps it
            log.error("an instance's filesystem could not be unmounted",
                      extra={"data": {"dir": str(directory), "error": str(exc)}})
            return
        if not keep_log:
            shutil.rmtree(directory, ignore_errors=True)
    finally:
        os.close(under)


def _copy_regular(source: Path, name: str, dir_fd: int) -> None:
    """Copy `source`, when it is a regular file (not a link or a FIFO of the app's), to `name` in dir_fd."""
    with open(os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as src:
        if not S_ISREG(os.fstat(src.fileno()).st_mode):
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(os.open(name, flags, 0o644, dir_fd=dir_fd), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def _keep_only_logs(directory: Path) -> None:
    """A crashed container's directory keeps its logs for the operator, and only them (what it wrote,
    perhaps past its disk quota, is no longer counted against the cell)."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if entry.name in LOG_NAMES:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if len(fields) > 2 and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _carries_guid(pid: int, guid: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return any(
        item in (f"INSTANCE_GUID={guid}".encode(), f"TASK_GUID={guid}".encode())
        for item in environ.split(b"\0")
    )


def kill_leftovers(containers_dir: Path) -> list[int]:
    """SIGKILL processes a previous run of this rep left behind, then remove their directories.

    A process is ours when it is in a process group recorded in a container's pid file AND carries
    that container's guid in its environment, so a recycled pid is never mistaken for a container.
    """
    killed: list[int] = []
    if not containers_dir.is_dir():
        return killed
    for directory in containers_dir.iterdir():
        pid_file = directory / PID_NAME
        if pid_file.exists():
            try:
                record = json.loads(pid_file.read_text())
                pgid, guid = int(record["pid"]), str(record["guid"])
            except (OSError, ValueError, KeyError, TypeError):
                pgid, guid = 0, ""
            if pgid > 0 and Path("/proc").is_dir():
                for pid in _group_members(pgid):
                    if _carries_guid(pid, guid) and signal_process(pid, signal.SIGKILL):
                        killed.append(pid)
        shutil.rmtree(directory, ignore_errors=True)
    return killed
