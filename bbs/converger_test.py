"""The convergence loop: runs on its timer and when woken, only while it holds the lease."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from bbs.server import running_bbs
from bbs.settings import BBSSettings
from common.models import CellPresence, DesiredLRPCreate
from tests.support.polling import eventually, expect

WAIT_S = 10.0


def recording_client(sent: list[str]) -> httpx.AsyncClient:
    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        return httpx.Response(202, json={})

    return httpx.AsyncClient(transport=httpx.MockTransport(handle), timeout=5)


async def test_timer_reauctions_stale_unclaimed_and_marks_expired_cells(
    tmp_path: Path, database_url: str
) -> None:
    sent: list[str] = []
    settings = BBSSettings(
        data_dir=tmp_path,
        database_url=database_url,
        auctioneer_url="http://auctioneer.test",
        convergence_interval=0.1,
        stale_unclaimed=0.3,
        presence_ttl=0.3,
    )
    async with running_bbs(settings, client=recording_client(sent)) as bbs:
        await bbs.cells.heartbeat(
            "c1",
            CellPresence.model_validate(
                {
                    "cell_id": "c1",
                    "zone": "z",
                    "rep_url": "http://c1",
                    "total": {"memory_mb": 1, "disk_mb": 1, "containers": 1},
                }
            ),
        )
        await bbs.desired_lrps.desire(DesiredLRPCreate(process_guid="web", instances=1, command=["true"]))
        await eventually(
            lambda: sent.count("http://auctioneer.test/v1/lrps") >= 2,
            WAIT_S, "a re-auction of the stale instance"
        )
        await eventually(lambda: bbs.metrics.convergence_seconds._sum.get() > 0, WAIT_S, "a timed pass")

        async def cells_disappeared() -> bool:
            async with bbs.store.read() as tx:
                return all(c.disappeared for c in await tx.list_cells())

        await eventually(cells_disappeared, WAIT_S, "c1 marked disappeared after its TTL")


async def test_only_the_lease_holder_converges(tmp_path: Path, database_url: str) -> None:
    settings = BBSSettings(
        data_dir=tmp_path,
        database_url=database_url,
        auctioneer_url="http://auctioneer.test",
        convergence_interval=0.1,
    )
    async with (
        running_bbs(settings, client=recording_client([])) as one,
        running_bbs(settings, client=recording_client([])) as two,
    ):
        converger_one, converger_two = one.uow.converger, two.uow.converger
        await eventually(lambda: converger_one.passes + converger_two.passes >= 5,
                         WAIT_S, "convergence passes")
        assert min(converger_one.passes, converger_two.passes) == 0, (
            converger_one.passes,
            converger_two.passes,
        )


async def test_crash_backoff_end_triggers_a_pass_without_waiting_for_the_timer(
    tmp_path: Path, database_url: str
) -> None:
    from bbs.lifecycle_wire import CELL_REPORT

    sent: list[str] = []
    settings = BBSSettings(
        data_dir=tmp_path,
        database_url=database_url,
        auctioneer_url="http://auctioneer.test",
        convergence_interval=60,  # the timer alone would take a minute
        immediate_restarts=1,  # every crash waits
        crash_backoff_min=0.3,
    )
    async with running_bbs(settings, client=recording_client(sent)) as bbs:
        await bbs.desired_lrps.desire(DesiredLRPCreate(process_guid="web", instances=1, command=["true"]))
        ref = {"process_guid": "web", "index": 0, "instance_guid": "a"}
        claimed_running = CELL_REPORT.validate_python({"claimed": [ref], "running": [ref]})
        await bbs.actual_lrps.lifecycle("c1", claimed_running)
        await bbs.actual_lrps.lifecycle("c1", CELL_REPORT.validate_python({"crashed": [ref]}))
        [row] = await bbs.actual_lrps.list_all()
        assert row["state"] == "CRASHED"

        async def state() -> str:
            return (await bbs.actual_lrps.list_all())[0]["state"]

        async def restarted() -> bool:
            current = await state()
            return expect(current == "UNCLAIMED", f"state {current}")

        await eventually(restarted, WAIT_S, "the crashed instance restarted after its 0.3 s backoff")
        await bbs.outbound.drain(5)
        assert sent.count("http://auctioneer.test/v1/lrps") == 2  # desire, then the restart


async def test_a_stopping_holder_releases_the_lease_and_the_other_replica_converges_at_once(
    tmp_path: Path, database_url: str
) -> None:
    ttl = 60.0  # without the release the other replica would wait a minute
    settings = BBSSettings(data_dir=tmp_path, database_url=database_url, auctioneer_url="http://auctioneer.test",
                           convergence_interval=0.1, lease_ttl=ttl)
    async with (
        running_bbs(settings, client=recording_client([])) as one,
        running_bbs(settings, client=recording_client([])) as two,
    ):
        await eventually(lambda: one.uow.converger.passes + two.uow.converger.passes >= 2,
                         WAIT_S, "convergence passes")
        holder, other = (one, two) if one.uow.converger.passes else (two, one)
        assert other.uow.converger.passes == 0, "expected one replica converging"
        await holder.uow.converger.stop()
        # Released: nobody holds it by the database's clock, or the other replica already does; kept, it
        # would be the holder's for another minute.
        released = await other.leases.held("convergence")
        assert released is None or released.owner == other.uow.converger.owner, released
        await eventually(lambda: other.uow.converger.passes > 0, 5.0, "the other replica converging")
        lease = await other.leases.get("convergence")
        assert lease is not None and lease.owner == other.uow.converger.owner and lease.token == 2, lease


async def test_a_late_heartbeat_never_cuts_a_presence_short(
    tmp_path: Path, database_url: str, monkeypatch
) -> None:
    """A heartbeat that reached a replica cut off from the database is written once it is back, after the
    rep's next heartbeats went through another replica: it must not move the cell's expiry back (the
    cell would be found gone at the next pass and its instances replaced)."""
    from bbs.operations import cells as cell_operations

    settings = BBSSettings(data_dir=tmp_path, database_url=database_url, auctioneer_url="http://auctioneer.test",
                           convergence_interval=0.1, presence_ttl=5.0)
    presence = CellPresence.model_validate({"cell_id": "c1", "zone": "z", "rep_url": "http://c1",
                                            "total": {"memory_mb": 1, "disk_mb": 1, "containers": 1}})
    async with running_bbs(settings, client=recording_client([])) as bbs:
        await bbs.cells.heartbeat("c1", presence)
        async with bbs.store.read() as tx:
            [fresh] = await tx.list_cells()
        sent_at = time.time() - 4.0  # the late one: sent 4 s ago, it would expire in 1 s
        monkeypatch.setattr(cell_operations.time, "time", lambda: sent_at)
        await bbs.cells.heartbeat("c1", presence)
        monkeypatch.undo()
        async with bbs.store.read() as tx:
            [kept] = await tx.list_cells()
        assert kept.expires_at == fresh.expires_at, (fresh.expires_at, kept.expires_at)
        passes = bbs.uow.converger.passes if bbs.uow.converger else 0
        await eventually(lambda: bbs.uow.converger is not None and bbs.uow.converger.passes > passes + 15,
                         WAIT_S, "passes")
        async with bbs.store.read() as tx:
            [cell] = await tx.list_cells()
        assert not cell.disappeared and cell.present(time.time())
