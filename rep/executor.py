"""What the rep asks of an executor, and how the executor answers.

The cell (rep/cell.py) owns bookkeeping and reporting; an executor only runs containers. Starts are
fire-and-forget: the executor later calls the `ExecutorListener` given with the start (running,
crashed, task finished). Stops and cancels are awaited: when they return the container is gone, and
the executor will not report anything more about it (no crash for a container being stopped).

Implementations: `ProcessExecutor` (rep/process_executor.py, real child processes) and
`SimExecutor` (rep/sim_executor.py, simulated containers; one instance serves every cell of a host).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from common.models import DesiredLRP, Task, TaskCompletion

from .reports import HostPort

if TYPE_CHECKING:
    from .instance_logs import LogBook
    from .usage import InstanceUsage


class LRPContainer(NamedTuple):
    """One instance to run: which LRP, which index, the guid the rep gave it, on which cell. A named
    tuple, not a frozen dataclass: as immutable, and built in less than half the time (one per start)."""

    cell_id: str
    instance_guid: str
    index: int  # type: ignore[assignment]  # the wire's name; shadows tuple.index
    desired: DesiredLRP

    @property
    def process_guid(self) -> str:
        return self.desired.process_guid


@dataclass(frozen=True, slots=True)
class TaskContainer:
    cell_id: str
    task: Task

    @property
    def task_guid(self) -> str:
        return self.task.task_guid


class ExecutorListener(Protocol):
    """The cell's side: called by the executor from the event loop, never blocking.

    The host part of an instance's address is the cell's advertised host, so executors report ports only
    (`PortMapping`s or plain `Port`s: anything with container_port and host_port).
    """

    def lrp_running(self, instance_guid: str, ports: Sequence[HostPort]) -> None: ...

    def lrp_crashed(self, instance_guid: str, reason: str) -> None: ...

    def task_finished(self, completion: TaskCompletion) -> None: ...


class ExecRefused(Exception):
    """`open_exec` ran nothing: no such instance here, not running, too many sessions, or an executor
    that cannot (the message says which, in the operator's words)."""


class ExecSession(ABC):
    """A command running in an instance's context (`vendue exec`, docs/exec.md). Output is read one chunk
    at a time, when the caller asks: nothing is buffered beyond what the pipes or the terminal hold."""

    @abstractmethod
    async def read(self) -> tuple[int, bytes] | None:
        """The next output: (1 stdout or 2 stderr, bytes); None once the process closed its outputs."""

    @abstractmethod
    async def write(self, data: bytes) -> None:
        """To the process's stdin (its terminal with a tty); returns once the pipe took it."""

    @abstractmethod
    def close_stdin(self) -> None:
        """No more input (with a tty: the terminal's end-of-file character)."""

    @abstractmethod
    def resize(self, rows: int, cols: int) -> None:
        """The terminal's new size (nothing without a tty)."""

    @abstractmethod
    async def wait(self) -> int:
        """The exit status, as a shell says it (128 + N for signal N)."""

    @abstractmethod
    def kill(self) -> None:
        """SIGKILL to everything the command started in its session; idempotent."""

    @abstractmethod
    async def close(self) -> None:
        """Kill, reap, release what the session holds (its terminal); idempotent."""


class Executor(ABC):
    # The output of its containers, when it has any (rep/instance_logs.py): the process executor's.
    logs: LogBook | None = None

    async def open(self) -> None:
        """Prepare (e.g. clean up what a previous run of this rep left behind)."""
        return None  # optional hook

    async def close(self) -> None:
        """Release executor resources; containers should have been stopped by then."""
        return None  # optional hook

    def promise_running(self, container: LRPContainer) -> Sequence[HostPort] | None:
        """Before the start: the ports the instance will be running with at once when started, for an
        executor that can promise that (nothing to fail, no health check to pass: the simulator's); None
        (the default) when only the start itself will tell. A promised running report travels with the
        instance's claim, sparing a lifecycle round; `lrp_running` must then report the same ports."""
        return None

    @abstractmethod
    def start_lrp(self, container: LRPContainer, listener: ExecutorListener) -> None:
        """Begin starting an instance; report `lrp_running` once healthy or `lrp_crashed`. Called only once
        the BBS accepted the instance's claim (rep/cell.py)."""

    @abstractmethod
    async def stop_lrp(self, instance_guid: str) -> None:
        """Stop an instance (gracefully, then forcibly); returns once it is gone."""

    @abstractmethod
    def run_task(self, container: TaskContainer, listener: ExecutorListener) -> None:
        """Begin running a task; report `task_finished` when it ends on its own."""

    @abstractmethod
    async def cancel_task(self, task_guid: str) -> None:
        """Kill a task; returns once it is gone. No `task_finished` follows."""

    def kill_all(self) -> None:
        """Forcibly kill every container now (a second shutdown signal); stops in progress then end."""
        return None  # optional hook

    def pid_of(self, instance_guid: str) -> int | None:
        """The OS process of an instance, where there is one."""
        return None

    async def open_exec(self, instance_guid: str, argv: list[str], tty: bool, rows: int,
                        cols: int) -> ExecSession:
        """Run `argv` in a running instance's context (its user, cgroup, directory and environment); a
        container executor would `runc exec`. Raises ExecRefused."""
        raise ExecRefused("this cell's executor cannot run commands in instances")

    def usage(self) -> list[InstanceUsage]:
        """Its instances' latest memory, CPU and disk figures (rep/usage.py); none where nothing runs
        (the sim executor)."""
        return []
