"""Prometheus metrics of one BBS (its own registry, so several apps can live in one test process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class BBSMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.auctioneer_requests = Counter(
            "vendue_bbs_auctioneer_requests_total",
            "Requests made to the auctioneer",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.rep_requests = Counter(
            "vendue_bbs_rep_requests_total",
            "Requests made to reps (stop, cancel) and completion callbacks",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.stale_writes = Counter(
            "vendue_bbs_stale_writes_total",
            "Writes refused (409) for carrying a fencing token older than the lease's current one",
            ["kind"],
            registry=self.registry,
        )
        self.convergence_seconds = Histogram(
            "vendue_bbs_convergence_seconds",
            "Duration of one convergence pass",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.actual_lrps = Gauge(
            "vendue_bbs_actual_lrps",
            "Actual LRPs by state and presence (as of the last convergence pass)",
            ["state", "presence"],
            registry=self.registry,
        )

    def set_actual_counts(self, counts: list[tuple[str, str, int]]) -> None:
        self.actual_lrps.clear()
        for state, presence, count in counts:
            self.actual_lrps.labels(state=state, presence=presence).set(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)
