"""A rep host in-process for a test (make_host: cells on a RecordingExecutor; app_of: its API behind an ASGI
client) and the desired LRPs the tests start on it."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from common.models import DesiredLRP, InstanceRef, LifecycleResult, ModificationTag
from rep.api import create_app
from rep.cell import CellConfig, RepCell
from rep.fencing import Fencing
from rep.host import RepHost
from rep.reports import Reports
from tests.support.recording_executor import RecordingExecutor

NOW = datetime(2024, 1, 1, tzinfo=UTC)
LEASE_TOKEN = 5  # the auctioneer lease's token, as these tests' BBS would say


async def lease_token() -> int:
    return LEASE_TOKEN


def app_of(host: RepHost, tmp_path) -> httpx.AsyncClient:
    """An in-process client of the rep's app (authorization off: the policy has its own test)."""
    app = create_app(host, Fencing(tmp_path / "fencing-token", lease_token), insecure=True)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rep")


def answer_outbox(
    cell: RepCell, refused: tuple[str, ...] = (), refused_tasks: tuple[str, ...] = ()
) -> Reports:
    """Deliver what the cell's outbox holds as its flusher would, the BBS refusing the instances (by guid)
    and tasks named and accepting the rest; the batch delivered."""
    batch, cell.outbox._pending = cell.outbox._pending, Reports()
    named = {ref.instance_guid: ref for ref in batch.claimed}
    refs = [InstanceRef(process_guid=named[g].process_guid, index=named[g].index, instance_guid=g)
            for g in refused]
    cell.apply_lifecycle_result(batch, LifecycleResult(refused=refs, refused_tasks=list(refused_tasks)))
    return batch


async def unsent(batch: Reports) -> LifecycleResult:
    raise AssertionError("these tests do not flush outboxes")


def desired(guid: str, memory_mb: int = 256) -> DesiredLRP:
    return DesiredLRP(
        process_guid=guid, memory_mb=memory_mb, created_at=NOW, modification_tag=ModificationTag(epoch="e")
    )


def make_host(cell_ids: list[str], memory_mb: int = 4096) -> tuple[RepHost, RecordingExecutor]:
    executor = RecordingExecutor()
    cells = [
        RepCell(
            CellConfig(cell_id=cid, zone="z0", rep_url="http://rep", host="127.0.0.1", memory_mb=memory_mb,
                       disk_mb=65536, containers=250, stacks=("cflinuxfs4",), rep_id="rep-a"),
            executor, unsent,
        )
        for cid in cell_ids
    ]
    return RepHost(cells, [executor], httpx.AsyncClient(), "http://bbs.test", rep_id="rep-a"), executor
