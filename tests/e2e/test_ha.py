"""End to end, high availability: two BBS replicas and two auctioneers on one PostgreSQL database; the
auctioneer leader and the BBS running convergence, whichever they are, are killed (-9) during a
1,000-instance push.

Afterwards every instance is RUNNING, each index once, and the fencing tokens the reps took work under
show that no batch was placed by two auctioneers: each rep's tokens only grow, and each token belonged to
one auctioneer (per the lease history polled from the BBS during the run).

Every rep and auctioneer lists both BBS URLs and moves to the other when one dies, so the test need not
arrange who leads: the survivors carry on through whichever BBS is left.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections import Counter
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

    def __init__(self, lc: LocalCluster) -> None:
        self.bbs_urls = list(lc.bbs_urls)
        self.verify = lc.verify
        self.owners: dict[tuple[str, int], set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def current(self, name: str) -> dict | None:
        for url in self.bbs_urls:
            with contextlib.suppress(httpx.HTTPError):
                response = httpx.get(f"{url}/v1/leases/{name}", timeout=1.0, verify=self.verify)
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
    return holder_of(lc, history.current(name))


def holder_of(lc: LocalCluster, lease: dict | None) -> str:
    """The component a lease names its owner ("" for none)."""
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


def every_index_running_once(lc: LocalCluster, bbs_url: str, process_guid: str, instances: int) -> bool:
    response = httpx.get(f"{bbs_url}/v1/actual_lrps", params={"process_guid": process_guid}, timeout=10.0,
                         verify=lc.verify)
    response.raise_for_status()
    actuals = response.json()["items"]
    running = sorted(a["index"] for a in actuals if a["state"] == "RUNNING" and a["presence"] == "ORDINARY")
    if running != list(range(instances)) or len(actuals) != instances:
        missing = sorted(set(range(instances)) - set(running))[:10]
        raise Unmet(f"{len(running)}/{instances} RUNNING ORDINARY of {len(actuals)} actuals; "
                    f"first missing indices {missing}")
    return True


def placed_any(lc: LocalCluster, bbs_url: str, process_guids: list[str]) -> bool:
    """Some instance of these apps is CLAIMED or RUNNING: a rep took it from an auction."""
    seen = {}
    for guid in process_guids:
        response = httpx.get(f"{bbs_url}/v1/actual_lrps", params={"process_guid": guid}, timeout=10.0,
                             verify=lc.verify)
        response.raise_for_status()
        seen[guid] = dict(Counter(a["state"] for a in response.json()["items"]))
        if seen[guid].get("CLAIMED") or seen[guid].get("RUNNING"):
            return True
    raise Unmet(f"nothing placed yet: {seen}")


def test_killing_the_leaders_mid_push_places_every_instance_once(ha_cluster: LocalCluster) -> None:
    lc = ha_cluster
    with LeaseHistory(lc) as history:
        leaders = {lease: wait_for(lambda lease=lease: holder(lc, history, lease), 4 * LEASE_TTL_S,
                                   f"a {lease} leader") for lease in ("auctioneer", "convergence")}
        other = {"auctioneer": "auctioneer-2", "auctioneer-2": "auctioneer", "bbs": "bbs-2", "bbs-2": "bbs"}
        survivor_url = lc.control_plane()[other[leaders["convergence"]]]
        # The push: APPS apps of INSTANCES / APPS instances each, desired one after another; the leaders
        # die after the first KILL_AFTER, so the rest reach the BBS while no auctioneer leads.
        for n in range(APPS):
            body = {"process_guid": f"fleet-{n}", "instances": INSTANCES // APPS, "memory_mb": 16,
                    "disk_mb": 16, "command": ["sleep", "infinity"]}
            response = httpx.post(
                f"{survivor_url}/v1/desired_lrps", json=body, timeout=30.0, verify=lc.verify
            )
            assert response.status_code == 201, f"expected 201 desiring fleet-{n}, saw {response.status_code}"
            if n + 1 == KILL_AFTER:
                # Not before the first leader has placed some of it: the reps must hold work from its term.
                wait_for(
                    lambda: placed_any(lc, survivor_url, [f"fleet-{i}" for i in range(KILL_AFTER)]),
                    30.0,
                    f"some instances of the first {KILL_AFTER} apps placed by {leaders['auctioneer']}",
                )
                lc.kill(leaders["auctioneer"])
                lc.kill(leaders["convergence"])
        for n in range(APPS):
            wait_for(
                lambda n=n: every_index_running_once(lc, survivor_url, f"fleet-{n}", INSTANCES // APPS),
                150.0,
                f"all {INSTANCES // APPS} instances of fleet-{n} RUNNING, each index once",
            )
        survivor = other[leaders["auctioneer"]]
        wait_for(
            lambda: expect(holder(lc, history, "auctioneer") == survivor, holder(lc, history, "auctioneer")),
            2 * LEASE_TTL_S,
            f"{survivor} leading after the kill",
        )
        wait_for(lambda: expect(holder(lc, history, "convergence") == other[leaders["convergence"]],
                                holder(lc, history, "convergence")),
                 2 * LEASE_TTL_S, f"{other[leaders['convergence']]} converging after the kill")

    owners_by_token: dict[int, set[str]] = {}
    for (lease, token), owners in history.owners.items():
        if lease == "auctioneer":
            owners_by_token[token] = owners
    assert all(len(o) == 1 for o in owners_by_token.values()), (
        f"a token held by two owners: {owners_by_token}"
    )
    seen_tokens: set[int] = set()
    for cell_id, rep in lc.reps.items():
        tokens = rep_state(rep.url, cell_id, lc.verify)["accepted_fencing_tokens"]
        assert tokens == sorted(set(tokens)), f"{cell_id} took work under tokens out of order: {tokens}"
        seen_tokens.update(tokens)
    assert len(seen_tokens) >= 2, (
        f"expected work from both leaders' terms on the reps, saw tokens {seen_tokens}"
    )
    assert seen_tokens <= set(owners_by_token), (
        f"reps took work under tokens {sorted(seen_tokens)}; the lease history knows "
        f"{sorted(owners_by_token)}"
    )


GRACEFUL_TTL_S = 12.0


@pytest.fixture
def ha_cluster_long_ttl(tmp_path: Path, fresh_postgres_database: str) -> Iterator[LocalCluster]:
    lc = LocalCluster(
        tmp_path / "cluster", cells=2, zones=2, executor="sim", sim_cells_per_process=2,
        ha=True, database_url=fresh_postgres_database,
        bbs_args=[*BBS_ARGS, "--lease-ttl", str(GRACEFUL_TTL_S)],
        auctioneer_args=["--lease-ttl", str(GRACEFUL_TTL_S)], rep_args=list(REP_ARGS),
    )
    try:
        lc.start(timeout=90.0)
        yield lc
    finally:
        lc.stop()


def test_a_leader_stopped_with_sigterm_hands_its_leases_over_well_before_the_ttl(
    ha_cluster_long_ttl: LocalCluster,
) -> None:
    lc = ha_cluster_long_ttl
    other = {"auctioneer": "auctioneer-2", "auctioneer-2": "auctioneer", "bbs": "bbs-2", "bbs-2": "bbs"}
    with LeaseHistory(lc) as history:
        for lease in ("auctioneer", "convergence"):
            leader = wait_for(
                lambda lease=lease: holder(lc, history, lease), 2 * GRACEFUL_TTL_S, f"a {lease} leader"
            )
            successor = other[leader]
            held = history.current(lease)  # the leader's term as last renewed: it ends no sooner
            lc.kill(leader, signal.SIGTERM)

            def taken(lease: str = lease, successor: str = successor) -> dict:
                now = history.current(lease)
                return expect(holder_of(lc, now) == successor and now, holder_of(lc, now) or "nobody")

            handed = wait_for(taken, 2 * GRACEFUL_TTL_S, f"{successor} holding the {lease} lease")
            # Without the release the successor could only take it once the leader's term ran out; its own
            # term (as the BBS records it: expiry less TTL, its start or its last renewal) began before.
            assert held is not None and handed["expires_at"] - GRACEFUL_TTL_S < held["expires_at"], (
                f"{successor} took the {lease} lease ({handed}) after {leader}'s term ran out ({held})")
            wait_for(lambda leader=leader: leader in lc.returncodes(), 30.0, f"{leader} exited")
            assert lc.returncodes()[leader] == 0, (
                f"expected {leader} to exit 0 on SIGTERM: {lc.returncodes()}"
            )
            lc.restart(leader, timeout=60.0)
    # Work still flows through the new leaders.
    body = {"process_guid": "after-handover", "instances": 4, "memory_mb": 16, "disk_mb": 16,
            "command": ["sleep", "infinity"]}
    url = lc.bbs_urls[0]
    assert httpx.post(f"{url}/v1/desired_lrps", json=body, timeout=30.0, verify=lc.verify).status_code == 201
    wait_for(lambda: every_index_running_once(lc, url, "after-handover", 4), 60.0,
             "4 instances RUNNING after the handovers")


def test_on_nats_the_reps_and_auctioneers_carry_on_through_the_other_bbs(
    tmp_path: Path, fresh_postgres_database: str
) -> None:
    """The BBS URL list serves the HTTP parts of the NATS transport too (lifecycle reports, heartbeats,
    the auctioneer's cell list and failure reports)."""
    lc = LocalCluster(
        tmp_path / "cluster",
        cells=2,
        zones=2,
        executor="sim",
        sim_cells_per_process=2,
        ha=True,
        database_url=fresh_postgres_database,
        transport="nats",
        bbs_args=[*BBS_ARGS, "--lease-ttl", str(LEASE_TTL_S)],
        auctioneer_args=["--lease-ttl", str(LEASE_TTL_S)],
        rep_args=list(REP_ARGS),
    )
    try:
        lc.start(timeout=90.0)
        first, second = lc.bbs_urls
        lc.kill("bbs")
        body = {"process_guid": "on-nats", "instances": 6, "memory_mb": 16, "disk_mb": 16,
                "command": ["sleep", "infinity"]}
        assert (
            httpx.post(f"{second}/v1/desired_lrps", json=body, timeout=30.0, verify=lc.verify).status_code
            == 201
        )
        # RUNNING means the reps' claims and running reports, HTTP only and sent to bbs-1 first, reached
        # bbs-2.
        wait_for(lambda: every_index_running_once(lc, second, "on-nats", 6), 60.0,
                 f"6 instances RUNNING with {first} dead")
    finally:
        lc.stop()
