"""End to end: /livez and /readyz of every component while what it needs goes away and comes back.

Alive throughout (a supervisor must not restart it for a dependency's fault); not ready, with the reason,
while it cannot do its work: NATS gone (transport nats) for the BBS, the auctioneer and the reps; the BBS
gone for the auctioneer (no lease answer: it cannot tell whether it leads); PostgreSQL gone for the BBS
replicas. Ready again once it is back. A standby (auctioneer or BBS) is ready: it serves, and takes over
within a lease TTL; only lease holders say LockHeld 1, and only the converging BBS exports the counts.
"""

from __future__ import annotations

import signal

import httpx
import pytest

from tests.support.metrics import scrape, value

from .conftest import E2ECluster, expect, wait_for

pytestmark = [pytest.mark.e2e]


def probes(c: E2ECluster, url: str) -> tuple[int, int, dict]:
    """(/livez status, /readyz status, /readyz body) of the component at `url`."""
    live = httpx.get(f"{url}/livez", timeout=5.0, verify=c.lc.verify).status_code
    ready = httpx.get(f"{url}/readyz", timeout=5.0, verify=c.lc.verify)
    return live, ready.status_code, ready.json()


def wait_ready(c: E2ECluster, urls: dict[str, str]) -> None:
    def all_ready() -> bool:
        seen = {name: probes(c, url)[:2] for name, url in urls.items()}
        return expect(set(seen.values()) == {(200, 200)}, seen)

    wait_for(all_ready, 30.0, "every component live and ready (200, 200)")


def wait_not_ready(c: E2ECluster, urls: dict[str, str], reasons: dict[str, str]) -> None:
    def not_ready_saying_why() -> bool:
        seen = {name: probes(c, url) for name, url in urls.items()}
        wanted = {name: (200, 503, {"reason": reasons[name]}) for name in urls}
        got = {
            name: (live, ready, {"reason": body.get("reason")}) for name, (live, ready, body) in seen.items()
        }
        return expect(got == wanted, got)

    wait_for(not_ready_saying_why, 30.0, f"live (200) and not ready (503) saying why: {reasons}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["nats"])
def test_nats_gone_makes_every_component_not_ready_and_back_ready(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    urls = {
        "bbs": c.lc.bbs_url,
        "auctioneer": c.lc.auctioneer_url,
        **{f"rep {cell_id}": rep.url for cell_id, rep in c.reps.items()},
    }
    wait_ready(c, urls)
    server = c.lc.nats_server
    server.kill()
    reasons = {
        "bbs": "not connected to NATS",
        "auctioneer": "NATS is not connected",
        **{name: "NATS not connected" for name in urls if name.startswith("rep ")},
    }
    wait_not_ready(c, urls, reasons)
    server.start()
    wait_ready(c, urls)


@pytest.mark.timeout(180)
def test_the_bbs_gone_makes_the_auctioneer_not_ready_and_back_ready(make_cluster) -> None:
    c = make_cluster(cells=1, zones=1)
    auctioneer = {"auctioneer": c.lc.auctioneer_url}
    wait_ready(c, auctioneer)
    c.lc.kill("bbs")
    wait_not_ready(c, auctioneer, {"auctioneer": "no BBS reachable for the lease"})
    c.lc.restart("bbs")
    wait_ready(c, auctioneer)


def lease_held(c: E2ECluster, url: str, lease: str) -> tuple[float | None, set[str]]:
    """(LockHeld{lease}, the names of the series) a component's /metrics shows."""
    samples = scrape(url, c.lc.verify)
    return value(samples, "LockHeld", lease=lease), {name for name, _ in samples}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("transport", ["http"])
def test_standbys_are_ready_only_lease_holders_count_and_the_database_gone_makes_the_bbs_not_ready(
    make_cluster,
) -> None:
    c = make_cluster(cells=1, zones=1, ha=True)  # two BBS replicas and two auctioneers on PostgreSQL
    plane = c.lc.control_plane()
    bbs = {name: url for name, url in plane.items() if name.startswith("bbs")}
    auctioneers = {name: url for name, url in plane.items() if name.startswith("auctioneer")}
    assert len(bbs) == len(auctioneers) == 2, plane
    wait_ready(c, plane)  # the standby auctioneer too: it forwards to the leader and takes over

    def one_holder_each() -> bool:
        converging = {name: lease_held(c, url, "convergence") for name, url in bbs.items()}
        auctioning = {name: lease_held(c, url, "auctioneer")[0] for name, url in auctioneers.items()}
        held = sorted(held for held, _ in converging.values())
        expect(held == [0, 1] and sorted(auctioning.values()) == [0, 1], f"{converging}, {auctioning}")
        # Only the replica that converges counts the cluster; the other's numbers would be stale.
        counting = {name: "LRPsDesired" in names for name, (held, names) in converging.items()}
        return expect(all(counting[name] == (held == 1) for name, (held, _) in converging.items()), counting)

    wait_for(one_holder_each, 30.0, "one BBS and one auctioneer holding their lease, only that BBS counting")

    database = c.lc.postgres.server
    database.stop(signal.SIGQUIT)  # immediate, as a crash
    try:
        wait_not_ready(c, bbs, dict.fromkeys(bbs, "the database does not answer"))
        # A write meanwhile is refused as a momentary state, which every client retries, not a 500.
        body = {"process_guid": "while-down", "instances": 1, "memory_mb": 16, "command": ["true"]}
        for name, url in bbs.items():
            write = httpx.post(f"{url}/v1/desired_lrps", json=body, timeout=10.0, verify=c.lc.verify)
            assert (write.status_code, write.headers.get("retry-after")) == (503, "1"), (name, write.text)
    finally:
        database.start_again()
    wait_ready(c, plane)
