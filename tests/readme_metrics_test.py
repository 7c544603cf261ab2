"""The README's metrics table reads as the tests expect: every row a known type and component."""

from __future__ import annotations

from tests.readme_metrics import COMPONENTS, SUFFIXES, metrics_table

DIEGO = {
    "LRPsDesired",
    "LRPsRunning",
    "LRPsClaimed",
    "LRPsUnclaimed",
    "LRPsMissing",
    "LRPsExtra",
    "CrashedActualLRPs",
    "CrashingDesiredLRPs",
    "SuspectRunningActualLRPs",
    "PresentCells",
    "SuspectCells",
    "TasksPending",
    "TasksRunning",
    "TasksCompleted",
    "TasksResolving",
    "ConvergenceLRPDuration",
    "ConvergenceLRPRuns_total",
    "AuctioneerLRPAuctionsStarted_total",
    "AuctioneerLRPAuctionsFailed_total",
    "AuctioneerTaskAuctionsStarted_total",
    "AuctioneerTaskAuctionsFailed_total",
    "AuctioneerFetchStatesDuration",
    "LockHeld",
    "RepCapacityRemainingMemory",
    "RepCapacityRemainingDisk",
    "RepCapacityRemainingContainers",
    "ContainerCount",
}


def test_the_table_lists_diegos_metrics_and_the_request_series_with_types_and_components() -> None:
    rows = metrics_table()
    series = [row.series for row in rows]
    assert len(series) == len(set(series)), f"a series listed twice: {series}"
    assert DIEGO <= set(series), f"missing from the README's table: {sorted(DIEGO - set(series))}"
    assert {"vendue_http_request_duration_seconds", "vendue_refused_requests_total"} <= set(series)
    for row in rows:
        assert row.type in SUFFIXES, row
        assert row.components and set(row.components) <= set(COMPONENTS), row
        assert (row.type == "counter") == row.series.endswith("_total"), (
            f"{row}: a counter's series ends in _total"
        )
