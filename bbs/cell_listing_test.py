"""The cell listing the auctioneer asks for every auction reuses each cell's JSON while nothing it is made
from changed: what it answers is always what the cells are now."""

from __future__ import annotations

import json

from tests.support.bbs_harness import Harness


async def listed(h: Harness) -> dict[str, dict]:
    response = await h.http.get("/v1/cells")
    assert response.status_code == 200, response.text
    return {c["cell_id"]: c for c in response.json()["items"]}


async def test_the_listing_follows_heartbeats_and_the_operators_flags(h: Harness) -> None:
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    first = await listed(h)
    assert first["c1"]["total"]["memory_mb"] == 4096 and first["c1"]["cordoned"] is False
    assert await listed(h) == first, "nothing changed: the same listing"

    await h.heartbeat("c1", total={"memory_mb": 2048, "disk_mb": 8192, "containers": 100})
    assert (await h.http.post("/v1/cells/c2/cordon")).status_code == 200
    now = await listed(h)
    assert now["c1"]["total"]["memory_mb"] == 2048, "a new heartbeat's presence is listed"
    assert now["c1"]["expires_at"] > first["c1"]["expires_at"]
    assert now["c2"]["cordoned"] is True, "the operator's flag is listed"
    assert (await h.http.post("/v1/cells/c2/uncordon")).status_code == 200
    assert (await listed(h))["c2"]["cordoned"] is False


async def test_the_listing_is_the_cell_states_encoded(h: Harness) -> None:
    for cell_id in ("c1", "c2", "c3"):
        await h.heartbeat(cell_id)
    body = (await h.http.get("/v1/cells")).text
    assert body == json.dumps({"items": await h.bbs.cells.list_all()}, separators=(",", ":"))
    assert body == (await h.http.get("/v1/cells")).text
