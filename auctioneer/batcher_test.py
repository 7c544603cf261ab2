import asyncio

import pytest

from auctioneer.batcher import Batch, Batcher, PendingLRP, PendingTask
from common.models import TaskStartRequest
from tests.auctioneer.fakes import WAIT_S, desired, start_request, task
from tests.support.polling import eventually, finishes

pytestmark = pytest.mark.timeout(30)


class RecordingAuction:
    """Plays the auction: records each batch; can be held open to see what arrives meanwhile."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.running = 0
        self.max_running = 0
        self.carry: list[Batch] = []  # returned by successive auctions

    async def __call__(self, batch: Batch) -> Batch:
        self.batches.append(batch)
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            await self.hold.wait()
        finally:
            self.running -= 1
        return self.carry.pop(0) if self.carry else Batch()

    def seen(self) -> str:
        return f"{len(self.batches)} batches, {self.running} running"


async def test_one_batch_holds_every_queued_request_deduped_latest_wins():
    auction = RecordingAuction()
    batcher = Batcher(auction)
    old, new = desired("web", 3, memory_mb=256), desired("web", 3, memory_mb=512)
    batcher.add_lrps([start_request(old, [0, 1]), start_request(new, [1, 2])])
    batcher.add_tasks(
        [TaskStartRequest(task=task("t1", memory_mb=1)), TaskStartRequest(task=task("t1", memory_mb=2))]
    )
    assert batcher.pending == 4

    batcher.start()
    try:
        await eventually(lambda: len(auction.batches) == 1, WAIT_S, "one batch", auction.seen)
        batch = auction.batches[0]
        assert sorted(batch.lrps) == [("web", 0), ("web", 1), ("web", 2)]
        assert batch.lrps[("web", 0)].desired.memory_mb == 256
        assert batch.lrps[("web", 1)].desired.memory_mb == 512  # the later request wins
        assert list(batch.tasks) == ["t1"] and batch.tasks["t1"].task.memory_mb == 2
        assert batcher.pending == 0
    finally:
        await batcher.stop(5)


async def test_requests_arriving_during_an_auction_form_the_next_batch_one_auction_at_a_time():
    auction = RecordingAuction()
    auction.hold.clear()
    batcher = Batcher(auction)
    batcher.start()
    try:
        batcher.add_lrps([start_request(desired("a", 1))])
        await eventually(lambda: auction.running == 1, WAIT_S, "an auction running", auction.seen)
        batcher.add_lrps([start_request(desired("b", 2))])
        batcher.add_tasks([TaskStartRequest(task=task("t1"))])
        assert batcher.pending == 3 and len(auction.batches) == 1  # queued, not auctioned yet

        auction.hold.set()
        await eventually(
            lambda: len(auction.batches) == 2 and auction.running == 0, WAIT_S, "two batches, none running",
            auction.seen,
        )
        assert list(auction.batches[0].lrps) == [("a", 0)]
        assert sorted(auction.batches[1].lrps) == [("b", 0), ("b", 1)] and list(auction.batches[1].tasks) == [
            "t1"
        ]
        assert auction.max_running == 1
    finally:
        await batcher.stop(5)


async def test_carried_work_joins_the_next_batch_but_a_newer_request_wins():
    auction = RecordingAuction()
    auction.hold.clear()
    batcher = Batcher(auction)
    old = desired("web", 2, memory_mb=256)
    carried = Batch()
    carried.add_lrp(PendingLRP(old, 0, attempts=1))
    carried.add_lrp(PendingLRP(old, 1, attempts=1))
    carried.add_task(PendingTask(task("t1"), attempts=2))
    auction.carry.append(carried)
    batcher.start()
    try:
        batcher.add_lrps([start_request(old)])
        await eventually(lambda: auction.running == 1, WAIT_S, "an auction running", auction.seen)
        newer = desired("web", 2, memory_mb=1024)
        batcher.add_lrps([start_request(newer, [1])])  # arrives while index 1 is being auctioned
        auction.hold.set()
        await eventually(lambda: len(auction.batches) == 2, WAIT_S, "two batches", auction.seen)
        second = auction.batches[1]
        assert second.lrps[("web", 0)].attempts == 1 and second.lrps[("web", 0)].desired.memory_mb == 256
        assert second.lrps[("web", 1)].attempts == 0 and second.lrps[("web", 1)].desired.memory_mb == 1024
        assert second.tasks["t1"].attempts == 2
    finally:
        await batcher.stop(5)


async def test_an_auction_over_its_deadline_is_abandoned_and_the_loop_goes_on():
    auction = RecordingAuction()
    auction.hold.clear()  # never released: every auction hangs
    batcher = Batcher(auction, auction_timeout=0.2)
    batcher.start()
    try:
        batcher.add_lrps([start_request(desired("a", 1))])
        await eventually(
            lambda: len(auction.batches) == 1 and auction.running == 0, WAIT_S, "one batch, none running",
            auction.seen,
        )
        batcher.add_lrps([start_request(desired("b", 1))])
        await eventually(lambda: len(auction.batches) == 2, WAIT_S, "two batches", auction.seen)
    finally:
        await batcher.stop(5)


async def test_stop_abandons_a_hung_auction_within_its_bound():
    auction = RecordingAuction()
    auction.hold.clear()
    batcher = Batcher(auction)
    batcher.start()
    batcher.add_lrps([start_request(desired("a", 1))])
    await eventually(lambda: auction.running == 1, WAIT_S, "an auction running", auction.seen)
    # The auction holds until the test lets it go, which it never does: only stop's bound can end it.
    await finishes(batcher.stop(0.2), WAIT_S, "the stop to abandon the hung auction")
    assert auction.running == 0 and not auction.hold.is_set(), "abandoned (cancelled), not finished"


class SwitchGate:
    """Plays the lease: leader or standby, switched by the test."""

    def __init__(self, leader: bool) -> None:
        self._leading, self._standing_by = asyncio.Event(), asyncio.Event()
        self.set(leader)

    @property
    def leader(self) -> bool:
        return self._leading.is_set()

    def set(self, leader: bool) -> None:
        (self._leading if leader else self._standing_by).set()
        (self._standing_by if leader else self._leading).clear()

    async def until_leader(self) -> None:
        await self._leading.wait()

    async def until_standby(self) -> None:
        await self._standing_by.wait()


async def test_a_standby_keeps_its_queue_until_it_leads():
    auction, gate = RecordingAuction(), SwitchGate(leader=False)
    batcher = Batcher(auction, gate=gate)
    batcher.start()
    try:
        batcher.add_lrps([start_request(desired("web", 1), [0])])
        await asyncio.sleep(0)  # the loop runs up to the gate, and waits there
        assert (auction.batches, batcher.pending) == ([], 1)
        gate.set(True)
        await eventually(lambda: len(auction.batches) == 1, WAIT_S, "one auction", auction.seen)
    finally:
        await batcher.stop(1.0)


async def test_losing_the_lease_abandons_the_running_auction_at_once():
    auction, gate = RecordingAuction(), SwitchGate(leader=True)
    auction.hold.clear()  # the auction runs until the test lets it go
    batcher = Batcher(auction, gate=gate)
    batcher.start()
    try:
        batcher.add_lrps([start_request(desired("web", 1), [0])])
        await eventually(lambda: auction.running == 1, WAIT_S, "an auction running", auction.seen)
        gate.set(False)
        await eventually(
            lambda: auction.running == 0 and not batcher.auction_running,
            WAIT_S, "the auction abandoned", auction.seen,
        )
        assert batcher.auctions_abandoned == 1
    finally:
        await batcher.stop(1.0)
