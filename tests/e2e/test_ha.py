"""End to end, high availability: two BBS replicas and two auctioneers on one PostgreSQL database; the
auctioneer leader and the BBS running convergence are killed (-9) during a 1,000-instance push.

Afterwards every instance is RUNNING, each index once, and the fencing tokens the reps took work under
show that no batch was placed by two auctioneers: each rep's tokens only grow, and each token belonged to
one auctioneer (per the lease history polled from the BBS during the run).

The reps report to the first BBS, and auctioneer-2 leases through bbs-2 (each process follows one BBS
URL), so the test first makes bbs-2 the convergence leader and auctioneer-2 the active auctioneer, then
kills that pair: the survivors lease through bbs-1, which the reps also use.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.cluster import LocalCluster

from .conftest import BBS_ARGS, REP_ARGS, Unmet, expect, rep_state, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

LEASE_TTL_S = 3.0
INSTANCES = 1000
APPS, KILL_AFTER = 10, 3
CELLS, CELLS_PER_PROCESS = 20, 10


class LeaseHistory:
    """Every (lease, token) -> owner seen, polled from whichever BBS answers."""

    def __init__(self, bbs_urls: list[str]) -> None:
        self.bbs_urls = bbs_urls
        self.owners: dict[tuple[str, int], set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def current(self, name: str) -> dict | None:
        for url in self.bbs_urls:
            with contextlib.suppress(httpx.HTTPError):
                response = httpx.get(f"{url}/v1/leases/{name}", timeout=1.0)
                if response.status_code == 200:
                    lease = response.json()
                    self.owners.setdefault((name, lease["token"]), set()).add(lease["owner"])
                    return lease
                if response.status_code == 404:
                    return None
        return None

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for name in ("auctioneer", "convergence"):
                self.current(name)

    def __enter__(self) -> LeaseHistory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)


def holder(lc: LocalCluster, history: LeaseHistory, name: str) -> str:
    """The component holding lease `name` ("" if none): its owner string carries the holder's pid."""
    lease = history.current(name)
    if lease is None:
        return ""
    pid = int(lease["owner"].split(":")[1])
    return next((component for component, p in lc.pids().items() if p == pid), "")


@pytest.fixture
def ha_cluster(tmp_path: Path, fresh_postgres_database: str) -> Iterator[LocalCluster]:
    lc = LocalCluster(
        tmp_path / "cluster", cells=CELLS, zones=2, executor="sim", sim_cells_per_process=CELLS_PER_PROCESS,
        ha=True, database_url=fresh_postgres_database,
        bbs_args=[*BBS_ARGS, "--lease-ttl", str(LEASE_TTL_S), "--stale-unclaimed", "5"],
        auctioneer_args=["--lease-ttl", str(LEASE_TTL_S)], rep_args=list(REP_ARGS),
    )
    try:
        lc.start(timeout=90.0)
        yield lc
    finally:
        lc.stop()


def make_second_pair_lead(lc: LocalCluster, history: LeaseHistory) -> None:
    """Kill the first BBS/auctioneer where they lead, until bbs-2 converges and auctioneer-2 auctions."""
    wanted = {"convergence": "bbs-2", "auctioneer": "auctioneer-2"}
    first_of = {"convergence": "bbs", "auctioneer": "auctioneer"}
    killed = []
    for lease, survivor in wanted.items():
        now = wait_for(lambda lease=lease: holder(lc, history, lease), 4 * LEASE_TTL_S, f"a {lease} leader")
        if now != survivor:
            lc.kill(first_of[lease])
            killed.append(first_of[lease])
    for lease, survivor in wanted.items():
        wait_for(lambda lease=lease, survivor=survivor: expect(holder(lc, history, lease) == survivor,
                                                               holder(lc, history, lease)),
                 3 * LEASE_TTL_S, f"{survivor} holding the {lease} lease")
    for component in killed:
        lc.restart(component, timeout=60.0)


def every_index_running_once(bbs_url: str, process_guid: str, instances: int) -> bool:
    response = httpx.get(f"{bbs_url}/v1/actual_lrps", params={"process_guid": process_guid}, timeout=10.0)
    response.raise_for_status()
    actuals = response.json()["items"]
    running = sorted(a["index"] for a in actuals if a["state"] == "RUNNING" and a["presence"] == "ORDINARY")
    if running != list(range(instances)) or len(actuals) != instances:
        missing = sorted(set(range(instances)) - set(running))[:10]
        raise Unmet(f"{len(running)}/{instances} RUNNING ORDINARY of {len(actuals)} actuals; "
                    f"first missing indices {missing}")
    return True


def test_killing_the_leaders_mid_push_places_every_instance_once(ha_cluster: LocalCluster) -> None:
    lc = ha_cluster
    bbs_urls = [lc._component(name).url for name in ("bbs", "bbs-2")]
    with LeaseHistory(bbs_urls) as history:
        make_second_pair_lead(lc, history)
        # The push: APPS apps of INSTANCES / APPS instances each, desired one after another; the leaders
        # die after the first KILL_AFTER, so the rest reach the BBS while no auctioneer leads.
        for n in range(APPS):
            body = {"process_guid": f"fleet-{n}", "instances": INSTANCES // APPS, "memory_mb": 16,
                    "disk_mb": 16, "command": ["sleep", "infinity"]}
            response = httpx.post(f"{lc.bbs_url}/v1/desired_lrps", json=body, timeout=30.0)
            assert response.status_code == 201, f"expected 201 desiring fleet-{n}, saw {response.status_code}"
            if n + 1 == KILL_AFTER:
                lc.kill("auctioneer-2")
                lc.kill("bbs-2")
        for n in range(APPS):
            wait_for(lambda n=n: every_index_running_once(lc.bbs_url, f"fleet-{n}", INSTANCES // APPS), 150.0,
                     f"all {INSTANCES // APPS} instances of fleet-{n} RUNNING, each index once")
        wait_for(lambda: expect(holder(lc, history, "auctioneer") == "auctioneer",
                                holder(lc, history, "auctioneer")),
                 2 * LEASE_TTL_S, "auctioneer-1 leading after the kill")

    owners_by_token: dict[int, set[str]] = {}
    for (lease, token), owners in history.owners.items():
        if lease == "auctioneer":
            owners_by_token[token] = owners
    assert all(len(o) == 1 for o in owners_by_token.values()), f"a token held by two owners: {owners_by_token}"
    seen_tokens: set[int] = set()
    for cell_id, rep in lc.reps.items():
        tokens = rep_state(rep.url)["accepted_fencing_tokens"]
        assert tokens == sorted(set(tokens)), f"{cell_id} took work under tokens out of order: {tokens}"
        seen_tokens.update(tokens)
    assert len(seen_tokens) >= 2, f"expected work from both leaders' terms on the reps, saw tokens {seen_tokens}"
    assert seen_tokens <= set(owners_by_token), (
        f"reps took work under tokens {sorted(seen_tokens)}; the lease history knows {sorted(owners_by_token)}"
    )
