"""End to end: what the components say about themselves — /metrics everywhere, the auctioneer's /v1/stats."""

from __future__ import annotations

import re

import httpx
import pytest

from .conftest import wait_all_running

pytestmark = [pytest.mark.e2e]

SAMPLE = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(\{.*\})?\s+\S+", re.MULTILINE)
STATS_KEYS = {"auctions", "lrps_placed", "lrps_failed", "tasks_placed", "tasks_failed", "requests_made",
              "last_state_fetch_seconds", "last_auction_seconds"}


@pytest.mark.timeout(120)
def test_every_component_serves_metrics_and_the_auctioneer_its_stats(make_cluster, transport):
    c = make_cluster(cells=2, zones=1)
    guid = c.guid("observed")
    c.bbs.desire(guid, 3)
    wait_all_running(c.bbs, guid, 3)

    stats = httpx.get(f"{c.lc.auctioneer_url}/v1/stats", timeout=5.0, verify=c.lc.verify).json()
    assert STATS_KEYS <= set(stats), (
        f"expected /v1/stats to hold {sorted(STATS_KEYS - set(stats))}, saw {stats}"
    )
    assert set(stats["requests_made"]) >= {"bbs", "rep_state", "rep_work"}, stats["requests_made"]
    assert stats["auctions"] >= 1 and stats["lrps_placed"] == 3 and stats["lrps_failed"] == 0, stats
    auctions = stats["auctions"]
    if transport == "http":
        # One state request per present cell per auction, one work request per winning cell at most.
        made = stats["requests_made"]
        assert made["rep_state"] == 2 * auctions, (
            f"expected 2 state requests (one per cell) per auction, saw {made['rep_state']} in {auctions}")
        assert 1 <= made["rep_work"] <= 2 * auctions, f"expected at most one work request per cell: {stats}"
    else:
        # One state request and reply per rep process (here one per cell) per auction; work by
        # request/reply per winning cell.
        sent = stats["messages"]
        assert (sent["state_request"], sent["state_reply"]) == (2 * auctions, 2 * auctions), (
            f"expected per auction 2 state requests and 2 replies (one per cell), saw {sent} in {auctions}")
        assert 1 <= sent["work_request"] == sent["work_reply"] <= 2 * auctions, (
            f"expected one work request per cell: {stats}"
        )
        assert stats["requests_made"]["rep_state"] == 0 and stats["bad_replies"] == 0, stats

    problems = []
    targets = {"bbs": c.lc.bbs_url, "auctioneer": c.lc.auctioneer_url,
               **{f"rep {cid}": rep.url for cid, rep in c.reps.items()}}
    for name, url in targets.items():
        r = httpx.get(f"{url}/metrics", timeout=5.0, verify=c.lc.verify)
        if r.status_code != 200 or not r.headers.get("content-type", "").startswith("text/plain") \
                or not SAMPLE.search(r.text):
            problems.append(f"{name}: GET {url}/metrics answered {r.status_code} "
                            f"{r.headers.get('content-type')!r} {r.text[:120]!r}")
    assert not problems, "expected prometheus text from every component's /metrics:\n" + "\n".join(problems)
