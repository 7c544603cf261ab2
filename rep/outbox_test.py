"""The lifecycle outbox: one request per round, nothing lost on failure, per-instance order kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from common.models import LifecycleResult
from tests.support.polling import eventually

from .outbox import Outbox
from .reports import Crash, Ref, Reports, Running

DEADLINE_S = 5.0


def ref(i: int) -> Ref:
    return Ref("app", i, f"g{i}")


def running(i: int) -> Running:
    return Running("app", i, f"g{i}", "127.0.0.1", [])


class RecordingSender:
    """The outbox's send callable (what rep/host.py's HostLifecycleSender is in a rep): records every
    lifecycle request; can be told to fail (as when the BBS is down) or to hold requests until released."""

    def __init__(self) -> None:
        self.requests: list[Reports] = []
        self.failures_left = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.result = LifecycleResult()

    async def send(self, batch: Reports) -> LifecycleResult:
        await self.gate.wait()
        if self.failures_left:
            self.failures_left -= 1
            raise ConnectionError("BBS down")
        self.requests.append(batch)
        return self.result


@pytest.fixture
async def running_outbox() -> AsyncIterator[Callable[..., Awaitable[tuple[Outbox, RecordingSender, list]]]]:
    tasks: list[asyncio.Task[None]] = []

    async def start(**kwargs: float) -> tuple[Outbox, RecordingSender, list[tuple[Reports, LifecycleResult]]]:
        sender = RecordingSender()
        results: list[tuple[Reports, LifecycleResult]] = []
        outbox = Outbox(sender.send, lambda batch, result: results.append((batch, result)), name="cell-a",
                        **kwargs)
        tasks.append(asyncio.create_task(outbox.run()))
        return outbox, sender, results

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_reports_added_together_go_in_one_request(running_outbox) -> None:
    outbox, sender, _ = await running_outbox()
    for i in range(100):
        outbox.claimed(ref(i))
    outbox.task_started("t1")

    assert await outbox.drain(DEADLINE_S)

    assert len(sender.requests) == 1, f"expected one request, saw {len(sender.requests)}"
    assert [r.index for r in sender.requests[0].claimed] == list(range(100))
    assert sender.requests[0].tasks_started == ["t1"]


async def test_reports_arriving_during_a_request_go_in_the_next_one(running_outbox) -> None:
    outbox, sender, _ = await running_outbox()
    sender.gate.clear()
    outbox.claimed(ref(0))
    await asyncio.sleep(0)  # the flusher takes the first report and waits on the gate
    for i in range(1, 50):
        outbox.claimed(ref(i))
        outbox.running(running(i))
    sender.gate.set()

    assert await outbox.drain(DEADLINE_S)

    assert [len(r.claimed) for r in sender.requests] == [1, 49]
    assert len(sender.requests[1].running) == 49


async def test_a_failed_request_is_retried_with_its_reports_first(running_outbox) -> None:
    outbox, sender, _ = await running_outbox(backoff_initial_s=0.01, backoff_max_s=0.02)
    sender.failures_left = 3
    outbox.claimed(ref(0))
    await eventually(lambda: sender.failures_left < 3,
                     DEADLINE_S, "a first failed attempt", lambda: sender.failures_left)
    outbox.running(running(0))
    outbox.crashed(Crash("app", 0, "g0", "exited with status 1"))
    outbox.claimed(ref(1))

    assert await outbox.drain(DEADLINE_S)

    delivered = Reports(
        claimed=[c for r in sender.requests for c in r.claimed],
        running=[c for r in sender.requests for c in r.running],
        crashed=[c for r in sender.requests for c in r.crashed],
    )
    assert [c.index for c in delivered.claimed] == [0, 1], "nothing lost, older first"
    assert [c.index for c in delivered.running] == [0]
    assert [c.index for c in delivered.crashed] == [0]
    assert outbox.failed_requests == 3
    # The claim of g0 never travels after its running or crash report.
    first_claim = next(
        n for n, r in enumerate(sender.requests) if any(c.instance_guid == "g0" for c in r.claimed)
    )
    first_running = next(n for n, r in enumerate(sender.requests) if r.running)
    assert first_claim <= first_running


async def test_results_are_handed_back_with_the_batch_they_answer(running_outbox) -> None:
    """The cell starts what the answered batch claimed: it must know which batch an answer is for."""
    outbox, sender, results = await running_outbox()
    sender.result = LifecycleResult(refused=[ref(7)._asdict()])
    outbox.claimed(ref(7))
    outbox.claimed(ref(8))

    assert await outbox.drain(DEADLINE_S)

    assert [(batch.claimed, result) for batch, result in results] == [
        ([ref(7), ref(8)], LifecycleResult(refused=[ref(7)._asdict()]))]


async def test_discard_drops_pending_reports_of_one_instance_or_task() -> None:
    outbox = Outbox(RecordingSender().send, lambda batch, result: None)
    outbox.claimed(ref(1))
    outbox.claimed(ref(2))
    outbox.running(running(1))
    outbox.task_started("t1")
    outbox.task_started("t2")

    outbox.discard_instance("g1")
    outbox.discard_task("t1")

    assert outbox.pending == 2


async def test_drain_reports_a_timeout_while_the_bbs_is_down(running_outbox) -> None:
    outbox, sender, _ = await running_outbox(backoff_initial_s=0.01, backoff_max_s=0.01)
    sender.failures_left = 10_000
    outbox.claimed(ref(0))

    assert await outbox.drain(0.1) is False
    assert outbox.pending == 1, "the report is kept for later"


@pytest.mark.parametrize(("linger_s", "expected_requests"), [(0.0, 2), (0.5, 1)])
async def test_with_a_linger_a_claim_and_a_quick_start_travel_in_one_request(
    running_outbox, linger_s: float, expected_requests: int
) -> None:
    outbox, sender, _ = await running_outbox(linger_s=linger_s)
    outbox.claimed(ref(0))
    await asyncio.sleep(0.05)  # the instance starts 50 ms after its claim: a window, not a synchronisation
    outbox.running(running(0))
    await eventually(
        lambda: sum(len(r.running) for r in sender.requests) == 1,
        DEADLINE_S, "the running report", lambda: sender.requests
    )
    assert len(sender.requests) == expected_requests, (linger_s, sender.requests)
    assert [r.index for b in sender.requests for r in b.claimed] == [0]


async def test_a_running_report_with_no_company_coming_does_not_linger(running_outbox) -> None:
    """A linger of 30 s: a report that waited for it would miss the deadline."""
    outbox, sender, _ = await running_outbox(linger_s=30.0)
    outbox.running(running(0), hurry=True)
    assert await outbox.drain(DEADLINE_S), f"expected the report sent at once; pending {outbox.pending}"
    assert [[x.index for x in r.running] for r in sender.requests] == [[0]]


async def test_a_claim_a_start_waits_on_cuts_the_linger_short(running_outbox) -> None:
    """An instance starts only once its claim is answered: lingering would delay its start as long. A
    linger of 30 s here: a report that waited for it would miss the deadline."""
    outbox, sender, _ = await running_outbox(linger_s=30.0)
    outbox.running(running(1))  # lingers, waiting for company
    await asyncio.sleep(0)
    assert await outbox.drain(0.05) is False, "a report nothing waits on lingers"
    outbox.claimed(ref(0), hurry=True)
    assert await outbox.drain(DEADLINE_S)
    assert [([c.index for c in r.claimed], [x.index for x in r.running]) for r in sender.requests] == [
        ([0], [1])], "the lingering report goes with the claim"

    tasks, task_sender, _ = await running_outbox(linger_s=30.0)
    tasks.task_started("t1")  # a task's claim: its command waits on it too
    assert await tasks.drain(DEADLINE_S)
    assert [r.tasks_started for r in task_sender.requests] == [["t1"]]
