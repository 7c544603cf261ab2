"""Prometheus metrics of one BBS (its own registry, so several apps can live in one test process)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from common.http_metrics import HTTPMetrics

from .diego_counts import PassCounts

NANOSECONDS = 1_000_000_000
# Diego's BBS gauge -> (the PassCounts field, what it counts): bbs/diego_counts.py says how each is counted.
DIEGO_GAUGES = {
    "LRPsDesired": ("lrps_desired", "LRP instances desired"),
    "LRPsUnclaimed": ("lrps_unclaimed", "LRP instances not yet claimed by a cell"),
    "LRPsClaimed": ("lrps_claimed", "LRP instances claimed by a cell and not yet running"),
    "LRPsRunning": ("lrps_running", "LRP instances running on cells"),
    "LRPsMissing": ("lrps_missing", "LRP instances desired with no instance claimed or running"),
    "LRPsExtra": ("lrps_extra", "LRP instances beyond their desired count (the last convergence pass)"),
    "CrashedActualLRPs": ("crashed_actual_lrps", "LRP instances crashed"),
    "CrashingDesiredLRPs": ("crashing_desired_lrps", "Desired LRPs with at least one crashed instance"),
    "SuspectRunningActualLRPs": ("suspect_running_actual_lrps",
                                 "Running LRP instances on cells whose presence expired"),
    "SuspectClaimedActualLRPs": ("suspect_claimed_actual_lrps",
                                 "Claimed LRP instances on cells whose presence expired"),
    "PresentCells": ("present_cells", "Cells whose presence has not expired"),
    "SuspectCells": ("suspect_cells", "Cells holding suspect LRP instances"),
    "TasksPending": ("tasks_pending", "Tasks pending"),
    "TasksRunning": ("tasks_running", "Tasks running"),
    "TasksCompleted": ("tasks_completed", "Tasks completed, not yet resolved"),
    "TasksResolving": ("tasks_resolving", "Tasks being resolved"),
}


class DiegoBBSMetrics(Collector):
    """Diego's names for what the BBS's convergence sees, in Diego's units (durations in nanoseconds), as of
    the last pass. Only the replica holding the convergence lease runs passes, so only it exports the
    counts (as only Diego's active BBS emits them): a replica that loses the lease drops them rather than
    export stale ones. ConvergenceLRPRuns and LockHeld{lease="convergence"} are always there."""

    def __init__(self) -> None:
        self.counts: PassCounts | None = None
        self.runs = 0
        self.last_pass_ns: int | None = None
        self.lease_held = False

    def counted(self, counts: PassCounts) -> None:
        self.counts = counts

    def converged(self, seconds: float) -> None:
        self.runs += 1
        self.last_pass_ns = round(seconds * NANOSECONDS)

    def lease(self, held: bool) -> None:
        self.lease_held = held
        if not held:
            self.counts = None
            self.last_pass_ns = None

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        counts = self.counts
        if counts is not None:
            for name, (field, documentation) in DIEGO_GAUGES.items():
                yield GaugeMetricFamily(name, documentation, value=getattr(counts, field))
        if self.last_pass_ns is not None:
            yield GaugeMetricFamily("ConvergenceLRPDuration", "Nanoseconds the last convergence pass took",
                                    value=self.last_pass_ns)
        yield CounterMetricFamily("ConvergenceLRPRuns", "Convergence passes run", value=self.runs)
        held = GaugeMetricFamily("LockHeld", "1 while this process holds the lease", labels=["lease"])
        held.add_metric(["convergence"], 1 if self.lease_held else 0)
        yield held


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
        # Rebalancing moves (bbs/rebalancer.py), Diego-style names: started, completed (the old instance
        # stopped once the new one ran), abandoned (the new one failed or was late: the old one kept).
        self.rebalance_started = Counter("RebalanceMovesStarted", "Rebalancing moves started",
                                         registry=self.registry)
        self.rebalance_completed = Counter("RebalanceMovesCompleted", "Rebalancing moves completed",
                                           registry=self.registry)
        self.rebalance_abandoned = Counter("RebalanceMovesAbandoned", "Rebalancing moves abandoned",
                                           registry=self.registry)
        self.http = HTTPMetrics(self.registry)  # per route, refusals (common/http_metrics.py)
        self.diego = DiegoBBSMetrics()
        self.registry.register(self.diego)

    def set_actual_counts(self, counts: list[tuple[str, str, int]]) -> None:
        self.actual_lrps.clear()
        for state, presence, count in counts:
            self.actual_lrps.labels(state=state, presence=presence).set(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)
