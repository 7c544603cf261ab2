"""End to end: the cache term on a real cluster (TLS on), over both transports. Two sim rep processes in
one zone: `warm` says its host caches the app's source blob (--sim-cached-blob) but is the smaller cell, so
Diego's score prefers `cold`. The warm rep's bid (the auctioneer's fetch, HTTP or NATS) and heartbeat (the
BBS) list the blob; with the auctioneer's --cache-weight the app's instance lands on the warm cell, with
the default weight 0 where Diego's score puts it, and `vendue why` says which candidate caches it. An app
on the objective strategy's default preset goes to the warm cell by its own cache term."""

from __future__ import annotations

import json

import pytest

from deploy.cluster_topology import SimRepProcess

from .conftest import E2ECluster, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

BLOB = "sha256:" + "c0ffee" * 10 + "c0de"
SIZES = ("--disk-mb", "8192", "--containers", "10", "--zone", "z0")
REPS = [
    SimRepProcess("rep-cold", ("--cell-id", "cold", "--memory-mb", "4096", *SIZES), (("cold", "z0"),)),
    SimRepProcess("rep-warm", ("--cell-id", "warm", "--memory-mb", "2048", "--sim-cached-blob", BLOB,
                               *SIZES), (("warm", "z0"),)),
]


def heartbeat_blobs(c: E2ECluster) -> dict[str, list[str]]:
    assert c.bbs is not None
    return {cell["cell_id"]: cell.get("cached_blobs", []) for cell in c.bbs.cells()}


@pytest.mark.parametrize(("weight", "expected"), [("0", "cold"), ("1", "warm")])
def test_the_auction_prefers_the_warm_cell_only_with_a_cache_weight(make_cluster, weight: str,
                                                                     expected: str) -> None:
    c: E2ECluster = make_cluster(cells=2, zones=1, sim_reps=REPS, auctioneer_args=("--cache-weight", weight))
    assert c.bbs is not None
    offers = c.rep_state("warm")["bid"]["offers"]
    assert offers is not None and offers["cached_blobs"] == [BLOB], offers
    assert c.rep_state("cold")["bid"]["offers"] is None  # a sim cell caching nothing offers nothing
    wait_for(lambda: expect(heartbeat_blobs(c) == {"warm": [BLOB], "cold": []}, heartbeat_blobs(c)), 15.0,
             "the warm cell's heartbeat listing the blob")

    guid = c.guid("web")
    c.bbs.desire(guid, 1, memory_mb=512, disk_mb=64, source_blob=BLOB)
    running = wait_all_running(c.bbs, guid, 1, answer=False)
    assert running[0]["cell_id"] == expected, (
        f"--cache-weight {weight}: expected {guid}/0 on {expected}, saw it on {running[0]['cell_id']}")

    def explained() -> dict:
        result = c.cli("why", guid, "0", "--json")
        expect(result.code == 0, f"exit {result.code}: {result.output}")
        return json.loads(result.stdout)

    row = wait_for(explained, 30.0, f"an explanation of {guid}/0")
    cached = {x["cell_id"]: x["components"]["cached"] for x in row["candidates"]}
    assert cached == {"warm": 1.0, "cold": 0.0}, row["candidates"]
    weighted = ["cache_locality" in x["components"] for x in row["candidates"]]
    assert weighted == [weight != "0"] * 2, row["candidates"]
    table = c.cli("why", guid, "0")
    assert table.code == 0 and "cached" in table.stdout, table.output

    if expected == "warm":
        # The objective strategy's default preset (diego-blog) weighs the cache in whatever the weight: warm
        # now has less of its memory free than cold (0.75 against 1), which alone would pick cold.
        other = c.guid("blog")
        c.bbs.desire(other, 1, memory_mb=64, disk_mb=64, source_blob=BLOB, strategy="objective")
        placed = wait_all_running(c.bbs, other, 1, answer=False)
        if placed[0]["cell_id"] != "warm":  # what the auction saw of each cell says why
            why = c.cli("why", other, "0", "--json")
            raise AssertionError(f"expected {other}/0 on warm, saw {placed[0]['cell_id']}; why: {why.output}")
