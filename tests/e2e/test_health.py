"""End to end: /livez and /readyz of every component while what it needs goes away and comes back.

Alive throughout (a supervisor must not restart it for a dependency's fault); not ready, with the reason,
while it cannot do its work: NATS gone (transport nats) for the BBS, the auctioneer and the reps; the BBS
gone for the auctioneer (no lease answer: it cannot tell whether it leads). Ready again once it is back.
"""

from __future__ import annotations

import httpx
import pytest

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
        got = {name: (live, ready, {"reason": body.get("reason")}) for name, (live, ready, body) in seen.items()}
        return expect(got == wanted, got)

    wait_for(not_ready_saying_why, 30.0, f"live (200) and not ready (503) saying why: {reasons}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("transport", ["nats"])
def test_nats_gone_makes_every_component_not_ready_and_back_ready(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    urls = {"bbs": c.lc.bbs_url, "auctioneer": c.lc.auctioneer_url,
            **{f"rep {cell_id}": rep.url for cell_id, rep in c.reps.items()}}
    wait_ready(c, urls)
    server = c.lc.nats_server
    server.kill()
    reasons = {"bbs": "not connected to NATS", "auctioneer": "NATS is not connected",
               **{name: "NATS not connected" for name in urls if name.startswith("rep ")}}
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
