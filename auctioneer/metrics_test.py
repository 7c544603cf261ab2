"""Diego's auctioneer series, read from the plain counters at scrape time."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from .metrics import DiegoAuctioneerMetrics, Metrics


def test_diegos_series_count_what_the_auctions_placed_and_whether_this_one_leads() -> None:
    metrics = Metrics()
    leading = [False]
    metrics.registry.register(DiegoAuctioneerMetrics(metrics, lambda: leading[0]))
    metrics.state_fetch(1.5)
    metrics.placed(lrps=7, tasks=2)
    metrics.failed(lrps=1, tasks=3)

    def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(s.labels.items())): s.value
            for family in text_string_to_metric_families(metrics.exposition().decode())
            for s in family.samples
        }

    standby = scraped()
    assert standby[("AuctioneerLRPAuctionsStarted_total", ())] == 7
    assert standby[("AuctioneerLRPAuctionsFailed_total", ())] == 1
    assert standby[("AuctioneerTaskAuctionsStarted_total", ())] == 2
    assert standby[("AuctioneerTaskAuctionsFailed_total", ())] == 3
    assert standby[("AuctioneerFetchStatesDuration", ())] == 1_500_000_000  # nanoseconds, as Diego's
    assert standby[("LockHeld", (("lease", "auctioneer"),))] == 0
    leading[0] = True
    assert scraped()[("LockHeld", (("lease", "auctioneer"),))] == 1
