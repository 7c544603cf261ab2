"""Real child processes as containers.

Each container is a directory `<data-dir>/<cell_id>/containers/<instance_guid>` (tasks:
`task-<task_guid>`) holding `output.log` and `output.log.1` (stdout and stderr through a pipe the rep
reads, capped and rotated: rep/output_log.py) and `pid` (pid and kernel start time). Its disk_mb is
enforced on the whole directory, logs included (rep/disk_usage.py): measured every
`disk_check_interval_s` and on exit; over it, the instance is stopped as a stop would and reported
crashed with "disk quota exceeded (N MB used of M MB)" (a task: failed with that reason).
The child:
- runs `desired.command` (argv, no shell) in that directory, with the rep's environment minus its
  `VENDUE_*` settings, then `desired.env`, then PORT (host port of the first container port; every
  container port gets a free host port), INSTANCE_INDEX, INSTANCE_GUID, PROCESS_GUID, CELL_ID
  (tasks: TASK_GUID, CELL_ID);
- leads its own process group (stop signals go to the whole group) and gets PR_SET_PDEATHSIG(SIGKILL),
  so `kill -9` of the rep takes it down too. Grandchildren do not inherit PDEATHSIG: a command that
  forks and does not `exec` leaves them behind until the rep restarts and kills its leftovers (every
  process still in a recorded process group that carries the container's guid in its environment);
- memory: RLIMIT_DATA = memory_mb (heap and private writable mappings, Linux >= 4.7). RLIMIT_AS would
  break runtimes that reserve large address ranges (Python, Go, the JVM). Thread stacks count against
  RLIMIT_DATA, so very thread-heavy apps need more memory_mb. `--no-memory-limit` turns it off.

An instance is RUNNING once its health check passes within `health_check.timeout_s`: `port` (a TCP
connect to 127.0.0.1:PORT; with no ports it degrades to `process`), `http` (GET path answers 2xx),
`process` (still alive after a short grace). A child that exits, or never turns healthy, is a crash:
"exited with status N" / "killed by signal N" / "health check (port) did not pass within 60s".
Stop: SIGTERM to the group, SIGKILL after the grace period.
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

import httpx

from common.models import HealthCheck, PortMapping, TaskCompletion
from common.procutil import child_preexec, free_port, signal_process, terminate_then_kill_async

from .disk_usage import DiskWatcher
from .executor import Executor, ExecutorListener, LRPContainer, TaskContainer
from .output_log import LOG_NAMES, OutputLog

log = logging.getLogger("rep.process")

MIB = 1024 * 1024
RESULT_BYTES = 4096
PID_NAME = "pid"
# How long an ended container's output may take to drain: every process holding the pipe is gone by then,
# but for one that escaped the kill (which then gets EPIPE).
OUTPUT_DRAIN_S = 1.0


@dataclass(slots=True, eq=False)
class _Child:
    """One container's process and the request to stop it."""

    guid: str
    directory: Path
    proc: asyncio.subprocess.Process | None = None
    stop_requested: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None
    output: OutputLog | None = None
    over_quota: str = ""  # the disk watcher's verdict, once it has stopped the container

    async def close_output(self) -> None:
        if self.output is not None:
            await self.output.finish(OUTPUT_DRAIN_S)
            self.output.close()


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
    def __init__(
        self,
        data_dir: Path,
        cell_id: str,
        *,
        stop_grace_s: float = 10.0,
        memory_limit: bool = True,
        process_grace_s: float = 1.0,
        log_cap_bytes: int = 10 * MIB,
        disk_check_interval_s: float = 2.0,
    ) -> None:
        self.containers_dir = Path(data_dir) / cell_id / "containers"
        self.cell_id = cell_id
        self.stop_grace_s = stop_grace_s
        self.memory_limit = memory_limit
        self.process_grace_s = process_grace_s
        self.log_cap_bytes = log_cap_bytes
        self._disk = DiskWatcher(disk_check_interval_s)
        self._quota_stops: set[asyncio.Task[int]] = set()
        self._lrps: dict[str, _Child] = {}
        self._tasks: dict[str, _Child] = {}
        self._http: httpx.AsyncClient | None = None
        self._base_env = {k: v for k, v in os.environ.items() if not k.startswith("VENDUE_")}

    async def open(self) -> None:
        self.containers_dir.mkdir(parents=True, exist_ok=True)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(2.0))
        killed = kill_leftovers(self.containers_dir)
        if killed:
            log.info("killed leftover container processes", extra={"data": {"pids": killed}})
        self._disk.start()

    async def close(self) -> None:
        children = list(self._lrps.values()) + list(self._tasks.values())
        for child in children:
            child.stop_requested.set()
        runners = [c.runner for c in children if c.runner is not None]
        if runners:
            await asyncio.wait(runners, timeout=self.stop_grace_s + 5)
        await self._disk.stop()
        if self._http is not None:
            await self._http.aclose()

    def kill_all(self) -> None:
        for child in list(self._lrps.values()) + list(self._tasks.values()):
            child.stop_requested.set()
            if child.proc is not None and child.proc.returncode is None:
                signal_process(child.proc.pid, signal.SIGKILL, group=True)

    def pid_of(self, instance_guid: str) -> int | None:
        child = self._lrps.get(instance_guid)
        return child.proc.pid if child is not None and child.proc is not None else None

    # --- LRPs ---------------------------------------------------------------------------------------

    def start_lrp(self, container: LRPContainer, listener: ExecutorListener) -> None:
        child = _Child(container.instance_guid, self.containers_dir / container.instance_guid)
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
        keep_directory = False
        try:
            desired = c.desired
            if not desired.command:
                listener.lrp_crashed(child.guid, "failed to start: the desired LRP has no command")
                return
            ports = [PortMapping(container_port=p, host_port=free_port()) for p in desired.ports]
            env = {
                **self._base_env,
                **desired.env,
                "INSTANCE_INDEX": str(c.index),
                "INSTANCE_GUID": c.instance_guid,
                "PROCESS_GUID": desired.process_guid,
                "CELL_ID": c.cell_id,
            }
            if ports:
                env["PORT"] = str(ports[0].host_port)
            data_limit = desired.memory_mb * MIB if self.memory_limit else None
            try:
                proc = await self._spawn(child, desired.command, env, data_limit)
            except OSError as exc:
                listener.lrp_crashed(child.guid, f"failed to start: {exc}")
                return
            self._watch_disk(child, desired.disk_mb)
            if child.stop_requested.is_set():
                await terminate_then_kill_async(proc, self.stop_grace_s, group=True)
                return
            healthy = await self._wait_healthy(child, proc, desired.health_check, ports)
            if child.stop_requested.is_set():
                await terminate_then_kill_async(proc, self.stop_grace_s, group=True)
                return
            if proc.returncode is not None:
                keep_directory = True
                signal_process(proc.pid, signal.SIGKILL, group=True)
                listener.lrp_crashed(child.guid, await self._crash_reason(child, proc.returncode))
                return
            if not healthy:
                keep_directory = True
                await terminate_then_kill_async(proc, 0.5, group=True)
                check = desired.health_check
                listener.lrp_crashed(
                    child.guid, f"health check ({check.type}) did not pass within {check.timeout_s:g}s"
                )
                return
            listener.lrp_running(child.guid, ports)
            if await _exited_or_stop(proc, child.stop_requested):
                keep_directory = True
                signal_process(proc.pid, signal.SIGKILL, group=True)  # what the leader left behind
                listener.lrp_crashed(child.guid, await self._crash_reason(child, proc.returncode or 0))
            else:
                await terminate_then_kill_async(proc, self.stop_grace_s, group=True)
        except Exception as exc:
            log.exception("container failed", extra={"data": {"instance_guid": child.guid}})
            if child.proc is not None and child.proc.returncode is None:
                signal_process(child.proc.pid, signal.SIGKILL, group=True)
            listener.lrp_crashed(child.guid, f"executor error: {exc!r}")
        finally:
            self._disk.unwatch(child.guid)
            self._lrps.pop(child.guid, None)
            await child.close_output()
            _cleanup(child.directory, keep_log=keep_directory)

    async def _wait_healthy(
        self, child: _Child, proc: asyncio.subprocess.Process, check: HealthCheck, ports: list[PortMapping]
    ) -> bool:
        """Poll the health check until it passes, the child exits, a stop comes, or the timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + check.timeout_s
        kind = check.type if (ports or check.type == "process") else "process"
        started = loop.time()
        interval = 0.02
        while True:
            if proc.returncode is not None or child.stop_requested.is_set():
                return False
            if kind == "process":
                if loop.time() - started >= min(self.process_grace_s, check.timeout_s / 2):
                    return True
            elif await self._probe(kind, ports[0].host_port, check.path):
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

    async def _probe(self, kind: str, port: int, path: str) -> bool:
        if kind == "http":
            assert self._http is not None
            try:
                response = await self._http.get(f"http://127.0.0.1:{port}{path}", timeout=1.0)
            except httpx.HTTPError:
                return False
            return 200 <= response.status_code < 300
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout=1.0)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    # --- tasks --------------------------------------------------------------------------------------

    def run_task(self, container: TaskContainer, listener: ExecutorListener) -> None:
        guid = container.task_guid
        child = _Child(guid, self.containers_dir / f"task-{guid}")
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
        try:
            env = {**self._base_env, **task.env, "TASK_GUID": task.task_guid, "CELL_ID": c.cell_id}
            data_limit = task.memory_mb * MIB if self.memory_limit else None
            try:
                proc = await self._spawn(child, task.command, env, data_limit)
            except OSError as exc:
                listener.task_finished(
                    TaskCompletion(
                        task_guid=task.task_guid, failed=True, failure_reason=f"failed to start: {exc}"
                    )
                )
                return
            self._watch_disk(child, task.disk_mb)
            if not await _exited_or_stop(proc, child.stop_requested):
                await terminate_then_kill_async(proc, self.stop_grace_s, group=True)
                return  # cancelled: the cell reports it
            signal_process(proc.pid, signal.SIGKILL, group=True)
            status = proc.returncode or 0
            over_quota = child.over_quota or await self._disk.check(child.guid)
            failed = status != 0 or bool(over_quota)
            assert child.output is not None
            await child.output.finish(OUTPUT_DRAIN_S)
            listener.task_finished(
                TaskCompletion(
                    task_guid=task.task_guid,
                    failed=failed,
                    failure_reason=(over_quota or exit_reason(status)) if failed else "",
                    exit_status=status,
                    result=child.output.tail(RESULT_BYTES),
                )
            )
        except Exception as exc:
            log.exception("task failed in the executor", extra={"data": {"task_guid": task.task_guid}})
            if child.proc is not None and child.proc.returncode is None:
                signal_process(child.proc.pid, signal.SIGKILL, group=True)
            listener.task_finished(
                TaskCompletion(
                    task_guid=task.task_guid, failed=True, failure_reason=f"executor error: {exc!r}"
                )
            )
        finally:
            self._disk.unwatch(child.guid)
            self._tasks.pop(child.guid, None)
            await child.close_output()
            _cleanup(child.directory, keep_log=False)

    # --- disk quota ---------------------------------------------------------------------------------

    def _watch_disk(self, child: _Child, disk_mb: int) -> None:
        self._disk.watch(child.guid, child.directory, disk_mb, lambda reason: self._stop_over_quota(child, reason))

    def _stop_over_quota(self, child: _Child, reason: str) -> None:
        """The disk watcher's verdict: stop the container as a stop would; its runner then sees it end and
        reports the crash (or the task's failure) with `reason`."""
        child.over_quota = reason
        if child.proc is not None and child.proc.returncode is None:
            stop = asyncio.create_task(terminate_then_kill_async(child.proc, self.stop_grace_s, group=True))
            self._quota_stops.add(stop)
            stop.add_done_callback(self._quota_stops.discard)

    async def _crash_reason(self, child: _Child, returncode: int) -> str:
        """Why a container ended on its own: over its disk quota (found by the watcher, or measured now),
        else its exit."""
        return child.over_quota or await self._disk.check(child.guid) or exit_reason(returncode)

    # --- spawning -----------------------------------------------------------------------------------

    async def _spawn(
        self, child: _Child, argv: list[str], env: dict[str, str], data_limit: int | None
    ) -> asyncio.subprocess.Process:
        child.directory.mkdir(parents=True, exist_ok=True)
        output = OutputLog(child.directory, self.log_cap_bytes)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=child.directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output.writer,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=child_preexec(data_limit_bytes=data_limit),
            )
        except BaseException:
            output.close()
            raise
        output.start()
        child.output = output
        child.proc = proc
        (child.directory / PID_NAME).write_text(
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


def _cleanup(directory: Path, *, keep_log: bool) -> None:
    """Remove a finished container's directory; a crashed one keeps its logs for the operator, and only
    them (what it wrote, perhaps past its disk quota, is no longer counted against the cell)."""
    if not keep_log:
        shutil.rmtree(directory, ignore_errors=True)
        return
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
