"""End to end: Diego's metrics as a real cluster exports them (TLS on, both transports).

Every series of the README's metrics table is scraped from the component the table names, and the counts
say what the cluster holds: three instances running, then one that no cell has room for (missing,
unclaimed, a failed LRP auction). Each component counts a caller without a certificate as refused.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

import httpx
import pytest

from tests.readme_metrics import metrics_table
from tests.support.metrics import Samples, scrape, value

from .conftest import E2ECluster, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e]


def total(samples: Samples, name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


def component_urls(c: E2ECluster) -> dict[str, list[str]]:
    return {
        "bbs": [c.lc.bbs_url],
        "auctioneer": [c.lc.auctioneer_url],
        "rep": [r.url for r in c.reps.values()],
    }


def missing_series(scraped: Mapping[str, Samples]) -> list[str]:
    """What the README's table promises that a component's scrape lacks, as 'component: name'."""
    missing = []
    for row in metrics_table():
        for component in row.components:
            names = {name for name, _ in scraped[component]}
            missing.extend(f"{component}: {name}" for name in row.names() if name not in names)
    return missing


@pytest.mark.timeout(180)
def test_every_metric_of_the_readme_table_is_exported_and_counts_the_cluster(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    urls = component_urls(c)
    ca_only = ssl.create_default_context(cafile=str(c.lc.client_tls().ca))
    for component, component_urls_ in urls.items():  # refused: no certificate, no token
        answer = httpx.get(f"{component_urls_[0]}/metrics", timeout=5.0, verify=ca_only)
        assert answer.status_code == 401, (
            f"{component}: expected 401 without a certificate, saw {answer.text}"
        )

    guid = c.guid("counted")
    c.bbs.desire(guid, 3)
    wait_all_running(c.bbs, guid, 3)
    first_rep = urls["rep"][0]

    def scraped() -> dict[str, Samples]:
        return {
            "bbs": scrape(urls["bbs"][0], c.lc.verify),
            "auctioneer": scrape(urls["auctioneer"][0], c.lc.verify),
            "rep": scrape(first_rep, c.lc.verify),
        }

    def counted() -> dict[str, Samples]:
        now = scraped()
        bbs, auctioneer = now["bbs"], now["auctioneer"]
        seen = {
            name: value(bbs, name) for name in ("LRPsDesired", "LRPsRunning", "LRPsMissing", "PresentCells")
        }
        expect(seen == {"LRPsDesired": 3, "LRPsRunning": 3, "LRPsMissing": 0, "PresentCells": 2}, seen)
        expect(value(bbs, "LockHeld", lease="convergence") == 1, "LockHeld{lease=convergence} not 1")
        expect(value(auctioneer, "LockHeld", lease="auctioneer") == 1, "LockHeld{lease=auctioneer} not 1")
        placed = value(auctioneer, "AuctioneerLRPAuctionsStarted_total")
        expect(placed == 3, f"AuctioneerLRPAuctionsStarted_total {placed}")
        containers = sum(total(scrape(url, c.lc.verify), "ContainerCount") for url in urls["rep"])
        expect(containers == 3, f"ContainerCount over the cells {containers}")
        return now

    now = wait_for(counted, 30.0, "the BBS, auctioneer and reps to count 3 desired, 3 running instances")
    for component, samples in now.items():
        refused = value(samples, "vendue_refused_requests_total", reason="no_identity")
        assert refused is not None and refused >= 1, f"{component}: the 401 above not counted: {refused}"
    assert (
        value(
            now["bbs"],
            "vendue_http_request_duration_seconds_count",
            method="POST",
            route="/v1/desired_lrps",
            status="201",
        )
        == 1
    ), "the push, timed under its route template"
    assert value(now["auctioneer"], "AuctioneerFetchStatesDuration") > 0
    assert (
        value(now["bbs"], "ConvergenceLRPDuration") > 0 and value(now["bbs"], "ConvergenceLRPRuns_total") >= 1
    )
    assert not missing_series(now), (
        f"expected every series of the README's table, missing {missing_series(now)}"
    )

    too_big = c.guid("too-big")
    c.bbs.desire(too_big, 1, memory_mb=1_000_000)  # no cell has room (4096 MB each)

    def missing_one() -> bool:
        bbs, auctioneer = scrape(urls["bbs"][0], c.lc.verify), scrape(urls["auctioneer"][0], c.lc.verify)
        seen = {
            name: value(bbs, name) for name in ("LRPsDesired", "LRPsRunning", "LRPsUnclaimed", "LRPsMissing")
        }
        failed = value(auctioneer, "AuctioneerLRPAuctionsFailed_total")
        return expect(
            seen == {"LRPsDesired": 4, "LRPsRunning": 3, "LRPsUnclaimed": 1, "LRPsMissing": 1}
            and failed is not None
            and failed >= 1,
            f"{seen}, AuctioneerLRPAuctionsFailed_total {failed}",
        )

    wait_for(missing_one, 30.0, "an instance no cell has room for counted missing, unclaimed and failed")
