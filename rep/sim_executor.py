"""Simulated containers, for scale work: one executor (one scheduler loop) serves every cell of a host.

No task or timer per container: every future event (a start completing, a crash, a task finishing)
is an entry in one heap ordered by due time, and a single loop pops whatever is due. Starts, the bulk
of the events, all take the same delay, so they come due in the order they were asked for: they wait
in a FIFO queue beside the heap (O(1) instead of O(log n) per start; a start that would come due
before the last queued one, as after a change of the delay, goes into the heap instead). Stopping a
container just forgets it; its heap entries find no matching record when they come due and are
skipped (lazy deletion). 1,000 cells x 250 instances is 250,000 small records and one coroutine.

A simulated instance runs nothing and cannot fail to start, so the executor promises its running report
(with its fake ports, drawn from its guid) before the start: the rep sends it with the instance's claim,
and the BBS has it RUNNING once the claim is accepted, `start_delay_s` before the simulated start ends.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.models import TaskCompletion

from .executor import ExecRefused, ExecSession, Executor, ExecutorListener, LRPContainer, TaskContainer
from .reports import HostPort, Port

log = logging.getLogger("rep.sim")

_START, _CRASH, _TASK_DONE = 0, 1, 2
_FIRST_FAKE_PORT, _FAKE_PORTS = 40000, 20000
_YIELD_EVERY = 2000  # due entries handled before letting the event loop serve requests


@dataclass(slots=True, eq=False)
class _SimLRP:
    container: LRPContainer
    listener: ExecutorListener
    ports: list[Port] | None = None  # given when it starts


@dataclass(slots=True, eq=False)
class _SimTask:
    container: TaskContainer
    listener: ExecutorListener


class SimExecutor(Executor):
    async def open_exec(self, instance_guid: str, argv: list[str], tty: bool, rows: int,
                        cols: int) -> ExecSession:
        raise ExecRefused("a simulated instance runs no process: exec needs a cell with the process executor")

    def __init__(
        self,
        *,
        start_delay_s: float = 0.05,
        crash_rate_per_s: float = 0.0,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.start_delay_s = start_delay_s
        self.crash_rate_per_s = crash_rate_per_s
        self._random = random.Random(seed)
        self._clock = clock
        self._heap: list[tuple[float, int, int, object]] = []
        self._starts: deque[tuple[float, _SimLRP]] = deque()  # in due order (see the module docstring)
        self._seq = itertools.count()
        self._lrps: dict[str, _SimLRP] = {}
        self._tasks: dict[str, _SimTask] = {}
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name="sim-executor")

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
            self._loop_task = None

    def _push(self, due: float, kind: int, record: object) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), kind, record))
        if self._heap[0][3] is record:
            self._wake.set()

    @staticmethod
    def _fake_ports(container: LRPContainer) -> list[Port]:
        """The same for a promise and the start it promised: drawn from the instance guid, distinct within
        the instance."""
        first = zlib.crc32(container.instance_guid.encode())
        return [Port(p, _FIRST_FAKE_PORT + (first + n) % _FAKE_PORTS)
                for n, p in enumerate(container.desired.ports)]

    # --- Executor -----------------------------------------------------------------------------------

    def promise_running(self, container: LRPContainer) -> Sequence[HostPort] | None:
        return self._fake_ports(container)

    def start_lrp(self, container: LRPContainer, listener: ExecutorListener) -> None:
        record = _SimLRP(container, listener)
        self._lrps[container.instance_guid] = record
        due = self._clock() + self.start_delay_s
        starts = self._starts
        if starts and due < starts[-1][0]:
            self._push(due, _START, record)
            return
        starts.append((due, record))
        if len(starts) == 1:
            self._wake.set()  # perhaps sooner than what the loop waits for

    async def stop_lrp(self, instance_guid: str) -> None:
        self._lrps.pop(instance_guid, None)

    def run_task(self, container: TaskContainer, listener: ExecutorListener) -> None:
        record = _SimTask(container, listener)
        self._tasks[container.task_guid] = record
        self._push(self._clock() + self.start_delay_s, _TASK_DONE, record)

    async def cancel_task(self, task_guid: str) -> None:
        self._tasks.pop(task_guid, None)

    @property
    def running_count(self) -> int:
        return len(self._lrps)

    # --- the scheduler loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            due = self._next_due()
            if due is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            delay = due - self._clock()
            if delay > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                except TimeoutError:
                    pass
                continue
            self.fire_due()
            await asyncio.sleep(0)

    def _next_due(self) -> float | None:
        if self._starts and (not self._heap or self._starts[0][0] <= self._heap[0][0]):
            return self._starts[0][0]
        return self._heap[0][0] if self._heap else None

    def fire_due(self, limit: int = _YIELD_EVERY) -> int:
        """Handle up to `limit` entries that are due now, earliest first; returns how many were handled."""
        now = self._clock()
        heap, starts = self._heap, self._starts
        handled = 0
        record: object
        while handled < limit:
            if starts and starts[0][0] <= now and (not heap or starts[0][0] <= heap[0][0]):
                kind, record = _START, starts.popleft()[1]
            elif heap and heap[0][0] <= now:
                _, _, kind, record = heapq.heappop(heap)
            else:
                break
            handled += 1
            try:
                self._fire(kind, record, now)
            except Exception:  # a listener bug must not stop every simulated container
                log.exception("simulated container event failed")
        return handled

    def _fire(self, kind: int, record: object, now: float) -> None:
        if kind == _TASK_DONE:
            assert isinstance(record, _SimTask)
            guid = record.container.task_guid
            if self._tasks.get(guid) is not record:
                return
            del self._tasks[guid]
            record.listener.task_finished(TaskCompletion(task_guid=guid, exit_status=0))
            return
        assert isinstance(record, _SimLRP)
        guid = record.container.instance_guid
        if self._lrps.get(guid) is not record:
            return  # stopped meanwhile
        if kind == _START:
            record.ports = self._fake_ports(record.container)
            record.listener.lrp_running(guid, record.ports)
            if self.crash_rate_per_s > 0:
                self._push(now + self._random.expovariate(self.crash_rate_per_s), _CRASH, record)
        elif kind == _CRASH:
            del self._lrps[guid]
            record.listener.lrp_crashed(guid, "exited with status 1 (simulated crash)")
