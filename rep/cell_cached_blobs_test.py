"""A cell's state and heartbeat list the blobs its host caches, the most recently used first, capped
(the auction's cache term: docs/placement.md)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from common.models import CellPresence, CellState
from common.models.artifact import Artifact
from common.models.cell import MAX_CACHED_BLOBS
from tests.support.recording_executor import RecordingExecutor

from .artifact_cache import ArtifactCache
from .cell import REPORTED_BLOBS, CachedBlobs, CellConfig, RepCell, no_blobs
from .main import sim_blobs
from .settings import RepSettings


def blob(n: int) -> tuple[str, bytes]:
    data = f"blob {n}\n".encode()
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def cell(blobs: CachedBlobs = no_blobs, real: bool = False) -> RepCell:
    config = CellConfig(cell_id="cell-a", zone="z1", rep_url="http://rep", host="10.0.0.5", memory_mb=1024,
                        disk_mb=8192, containers=10, stacks=("cflinuxfs4",), report_host_metrics=real)
    return RepCell(config, RecordingExecutor(), _never_sent, cached_blobs=blobs)


async def _never_sent(batch: object) -> object:
    raise AssertionError("not sent")


@pytest.fixture
async def cache(tmp_path: Path):
    served = dict(blob(n) for n in range(4))

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=served[request.url.path.rsplit("/", 1)[1]])

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        yield ArtifactCache(tmp_path / "cache", 1 << 20, bbs_client=client, bbs_url="http://bbs")


async def test_the_cache_lists_its_digests_most_recently_used_first(cache: ArtifactCache) -> None:
    a, b, c = (Artifact(digest=blob(n)[0], dest=f"d{n}") for n in range(3))
    for artifact in (a, b, c):
        await cache.ensure(artifact)
    assert cache.recent(10) == [c.digest, b.digest, a.digest]
    await cache.ensure(a)  # a hit: used now
    assert cache.recent(10) == [a.digest, c.digest, b.digest]
    assert cache.recent(2) == [a.digest, c.digest]
    cache.evict(c.digest)
    assert cache.recent(10) == [a.digest, b.digest]
    # a restarted rep reads the order back from when each blob was settled
    assert ArtifactCache(cache.root, 1 << 20).recent(10) == [b.digest, a.digest]


async def test_a_cells_state_and_heartbeat_list_what_its_hosts_cache_holds(cache: ArtifactCache) -> None:
    a, b = (Artifact(digest=blob(n)[0], dest=f"d{n}") for n in range(2))
    real = cell(cache.recent, real=True)
    assert real.state().offers is not None and real.state().offers.cached_blobs == []
    await cache.ensure(a)
    await cache.ensure(b)
    state = CellState.model_validate(real.state().model_dump())  # what goes on the wire, read back
    assert state.offers is not None and state.offers.cached_blobs == [b.digest, a.digest]
    assert state.offers.host is not None  # still its host's load beside
    assert real.presence().cached_blobs == [b.digest, a.digest]


def test_the_lists_are_capped_most_recent_kept() -> None:
    digests = [blob(n)[0] for n in range(REPORTED_BLOBS + 10)]
    sim = cell(sim_blobs(digests + digests[:3]))  # given twice: listed once
    state = sim.state()
    assert state.offers is not None and state.offers.cached_blobs == digests[:REPORTED_BLOBS]
    assert sim.presence().cached_blobs == digests[:REPORTED_BLOBS]
    assert REPORTED_BLOBS <= MAX_CACHED_BLOBS


def test_a_sim_cell_without_blobs_offers_nothing() -> None:
    assert cell().state().offers is None and cell().presence().cached_blobs == []


def test_the_wire_refuses_more_than_its_cap() -> None:
    too_many = [blob(n)[0] for n in range(MAX_CACHED_BLOBS + 1)]
    body = {"cell_id": "c", "zone": "z", "rep_url": "http://rep", "total": {"memory_mb": 1, "disk_mb": 1,
                                                                            "containers": 1}}
    with pytest.raises(ValidationError, match="cached_blobs"):
        CellPresence.model_validate({**body, "cached_blobs": too_many})
    with pytest.raises(ValidationError, match="cached_blobs"):
        CellState.model_validate({**body, "available": body["total"], "offers": {"cached_blobs": too_many}})


def test_sim_cached_blob_takes_digests_only() -> None:
    digest = blob(0)[0]
    assert RepSettings(sim_cached_blobs=[digest]).sim_cached_blobs == [digest]
    with pytest.raises(ValidationError, match="sim_cached_blobs"):
        RepSettings(sim_cached_blobs=["droplet-7"])
