"""Fault: nats-server killed and restarted in the middle of a 500-instance push, on a real local cluster
(BBS, auctioneer, one sim rep process hosting 4 cells) running `--transport nats`.

Half the push is desired while NATS is up; NATS is killed once instances start running; the other half
is desired while NATS is down (its auction request cannot go out); NATS comes back on the same port. The
clients reconnect, nothing desired is lost, and convergence re-auctions what was in flight: afterwards
all 500 are RUNNING, each index exactly once in the BBS and on the cells.
"""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import httpx
import pytest

from deploy.cluster import LocalCluster
from tests.support import polling

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(240)]

CELLS = 4
HALF = 250


# A request refused while NATS or a component restarts: not yet.
wait_for = functools.partial(polling.wait_for, interval=0.1, retry_on=(httpx.HTTPError,))


def running_indices(http: httpx.Client, cluster: LocalCluster, guid: str) -> list[int]:
    response = http.get(
        f"{cluster.bbs_url}/v1/actual_lrps", params={"process_guid": guid, "presence": "ORDINARY"}
    )
    response.raise_for_status()
    return sorted(a["index"] for a in response.json()["items"] if a["state"] == "RUNNING")


def held_on_cells(http: httpx.Client, cluster: LocalCluster) -> Counter:
    """(process_guid, index) -> how many cells hold it (from every rep process's full /state)."""
    held: Counter = Counter()
    for url in {rep.url for rep in cluster.reps.values()}:
        for cell in http.get(f"{url}/state?lrps=full").json()["cells"]:
            for lrp in cell["lrps"]:
                held[(lrp["process_guid"], lrp["index"])] += 1
    return held


def test_a_nats_restart_mid_push_loses_nothing_and_places_each_index_once(tmp_path: Path) -> None:
    cluster = LocalCluster(
        tmp_path / "cluster", cells=CELLS, zones=2, executor="sim", sim_cells_per_process=CELLS,
        cell_memory_mb=64 * 1024, cell_disk_mb=64 * 1024, cell_containers=250,
        # Re-auction UNCLAIMED instances after 2 s (not 30 s): what a lost auction request leaves behind.
        bbs_args=["--stale-unclaimed", "2"], transport="nats",  # the launcher's embedded nats-server
    )
    try:
        cluster.start(timeout=90)
        server = cluster.nats_server
        assert server is not None and server.tls is not None, "expected an embedded nats-server with TLS"
        with cluster.http_client(timeout=10) as http:
            bbs = cluster.bbs_url
            body = {"memory_mb": 64, "disk_mb": 64, "instances": HALF, "command": ["true"]}
            assert (
                http.post(f"{bbs}/v1/desired_lrps", json={"process_guid": "first", **body}).status_code == 201
            )
            wait_for(
                lambda: running_indices(http, cluster, "first"),
                60,
                "instances of `first` running",
                lambda: "none",
            )

            server.kill()
            wait_for(lambda: http.get(f"{cluster.auctioneer_url}/ping", timeout=5).status_code == 503, 30,
                     "the auctioneer to notice NATS is gone (/ping 503)", lambda: "still 200")
            assert (
                http.post(f"{bbs}/v1/desired_lrps", json={"process_guid": "second", **body}).status_code
                == 201
            )

            server.start()
            for guid in ("first", "second"):
                wait_for(lambda g=guid: running_indices(http, cluster, g) == list(range(HALF)), 120,
                         f"every index of {guid} RUNNING once",
                         lambda g=guid: f"{len(running_indices(http, cluster, g))} running")

            def each_index_once_on_cells() -> bool:
                held = held_on_cells(http, cluster)
                return len(held) == 2 * HALF and set(held.values()) == {1}

            wait_for(
                each_index_once_on_cells,
                60,
                "500 instances on the cells, each (guid, index) on one cell",
                lambda: Counter(held_on_cells(http, cluster).values()),
            )
            assert cluster.returncodes() == {}, f"no component should have exited: {cluster.returncodes()}"
            stats = http.get(f"{cluster.auctioneer_url}/v1/stats").json()
            assert stats["nats"]["reconnects"] >= 1, stats["nats"]
    finally:
        cluster.stop()
    assert cluster.nats_server is not None and not cluster.nats_server.running, "expected nats-server stopped"
