"""A cell's lifecycle outbox: everything the cell has to tell the BBS, sent as ONE request per round.

Reports accumulate while a flush is in flight; the flusher sends the next batch as soon as the
previous request finished. With `linger_s`, the first report after a quiet spell waits that long for
company (as Kafka's linger.ms): the claims of work arriving in several pieces travel together, and the
running reports of instances that start together, at the price of reports arriving up to `linger_s`
later; a running report with no other start in flight to wait for (`running(..., hurry=True)`) goes at
once. Each answer goes back with the batch it answers: the cell starts an instance (runs a task) only
once the batch carrying its claim was answered without refusing it; so a claim a start waits on
(`claimed(..., hurry=True)`, `task_started`) cuts the linger short, which would delay that start by as
much. A failed request keeps its reports (ahead of newer ones) and is retried with common/retry.py's
jittered backoff, so nothing is lost.

Ordering: an instance goes claimed -> running -> crashed|removed exactly once (a restart gets a new
instance guid), and a task started -> completed. Those are the field orders of `CellLifecycle`, so a
receiver that applies the lists in field order sees each instance's reports in the order they
happened, even when a retried batch and newer reports travel together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from common.models import LifecycleResult, TaskCompletion
from common.retry import LIFECYCLE_REPORTS, Backoff

from .reports import Crash, Ref, Reports, Running

log = logging.getLogger("rep.outbox")

# A batch is plain data (rep/reports.py); the sender writes it as a CellLifecycle body.
SendLifecycle = Callable[[Reports], Awaitable[LifecycleResult]]
OnResult = Callable[[Reports, LifecycleResult], None]  # the batch delivered, and the BBS's answer


class Outbox:
    def __init__(
        self,
        send: SendLifecycle,
        on_result: OnResult,
        *,
        name: str = "",
        backoff_initial_s: float = LIFECYCLE_REPORTS.first_s,
        backoff_max_s: float = LIFECYCLE_REPORTS.max_s,
        linger_s: float = 0.0,
    ) -> None:
        self._send = send
        self._on_result = on_result
        self._name = name
        self._backoff_initial_s = backoff_initial_s
        self._backoff_max_s = backoff_max_s
        self._linger_s = linger_s
        self._sent_at = -1e9  # loop time the previous request finished
        self._pending = Reports()
        self._in_flight = 0  # reports in the request being sent now
        self._wake = asyncio.Event()
        self._hurry = asyncio.Event()  # a report something waits on is pending: send without lingering
        self._idle = asyncio.Event()
        self._idle.set()
        self.sent_requests = 0
        self.failed_requests = 0

    # --- adding reports (synchronous: callable from request handlers and executor callbacks) -------

    def claimed(self, ref: Ref, *, hurry: bool = False) -> None:
        """`hurry`: the instance's start waits on the claim's answer (no running report travels with it)."""
        self._pending.claimed.append(ref)
        if hurry:
            self._hurry.set()
        self._kick()

    def running(self, report: Running, *, hurry: bool = False) -> None:
        """`hurry`: no other report is on its way to keep it company (the cell starts nothing else)."""
        self._pending.running.append(report)
        if hurry:
            self._hurry.set()
        self._kick()

    def crashed(self, report: Crash) -> None:
        self._pending.crashed.append(report)
        self._kick()

    def removed(self, ref: Ref) -> None:
        self._pending.removed.append(ref)
        self._kick()

    def task_started(self, task_guid: str) -> None:
        """A task's claim: its command runs only once it is answered."""
        self._pending.tasks_started.append(task_guid)
        self._hurry.set()
        self._kick()

    def task_completed(self, completion: TaskCompletion) -> None:
        self._pending.tasks_completed.append(completion)
        self._kick()

    def discard_instance(self, instance_guid: str) -> None:
        """Drop pending reports of an instance the BBS refused (they would only be refused again)."""
        p = self._pending
        p.claimed = [r for r in p.claimed if r.instance_guid != instance_guid]
        p.running = [r for r in p.running if r.instance_guid != instance_guid]
        p.crashed = [r for r in p.crashed if r.instance_guid != instance_guid]
        p.removed = [r for r in p.removed if r.instance_guid != instance_guid]

    def discard_task(self, task_guid: str) -> None:
        p = self._pending
        p.tasks_started = [g for g in p.tasks_started if g != task_guid]
        p.tasks_completed = [c for c in p.tasks_completed if c.task_guid != task_guid]

    def start_pending(self, task_guid: str) -> bool:
        """Whether this task's start is still to be delivered (not yet in a request the BBS answered)."""
        return task_guid in self._pending.tasks_started

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _kick(self) -> None:
        self._idle.clear()
        self._wake.set()

    # --- flushing ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """The flusher: one request at a time, each carrying everything pending."""
        delays = Backoff(self._backoff_initial_s, self._backoff_max_s).delays()  # common/retry.py's jitter
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            if self._linger_s and not self._hurry.is_set() and loop.time() - self._sent_at > self._linger_s:
                # Quiet until now: let this round's reports gather, unless a start comes to wait on one
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), self._linger_s)
            self._wake.clear()
            self._hurry.clear()
            batch, self._pending = self._pending, Reports()
            if len(batch) == 0:
                self._idle.set()
                continue
            self._in_flight = len(batch)
            try:
                result = await self._send(batch)
            except asyncio.CancelledError:
                self._pending = batch.then(self._pending)
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: keep the reports and retry
                self._pending = batch.then(self._pending)
                self.failed_requests += 1
                delay = next(delays)
                log.warning(
                    "lifecycle report failed; retrying",
                    extra={"data": {"cell_id": self._name, "error": repr(exc), "retry_in_s": delay}},
                )
                self._in_flight = 0
                self._wake.set()
                self._hurry.set()  # the retried reports have waited enough
                await asyncio.sleep(delay)
                continue
            self._in_flight = 0
            self._sent_at = loop.time()
            self.sent_requests += 1
            delays.reset()
            try:
                self._on_result(batch, result)
            except Exception:  # a bug in the handler must not kill the flusher
                log.exception("handling the lifecycle result failed", extra={"data": {"cell_id": self._name}})
            if len(self._pending):
                self._wake.set()
            else:
                self._idle.set()

    async def drain(self, timeout_s: float) -> bool:
        """Wait until everything pending was delivered; False when the deadline passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=timeout_s)
        except TimeoutError:
            return False
        return True
