"""What the auctioneer counts: Prometheus series for /metrics and plain counters for /v1/stats.

Each service instance owns its registry, so tests can run several auctioneers in one process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from common.http_metrics import HTTPMetrics

REQUEST_TARGETS = ("bbs", "rep_state", "rep_work")
# NATS messages the auctioneer sends or receives, by kind (one state request gathers many replies).
MESSAGE_KINDS = ("state_request", "state_reply", "work_request", "work_reply")
_BATCH_BUCKETS = (1, 5, 10, 50, 100, 500, 1_000, 5_000, 10_000, 50_000, 250_000)
NANOSECONDS = 1_000_000_000
_SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._auctions = Counter("vendue_auctioneer_auctions", "Auctions run.", registry=r)
        self._batch_size = Histogram(
            "vendue_auctioneer_batch_size", "Items (LRP instances and tasks) per auction.",
            buckets=_BATCH_BUCKETS, registry=r,
        )
        self._auction_seconds = Histogram(
            "vendue_auctioneer_auction_duration_seconds", "Wall time of one auction.",
            buckets=_SECONDS_BUCKETS, registry=r,
        )
        self._fetch_seconds = Histogram(
            "vendue_auctioneer_state_fetch_seconds", "Wall time to fetch every cell's state.",
            buckets=_SECONDS_BUCKETS, registry=r,
        )
        self._requests = Counter(
            "vendue_auctioneer_requests", "HTTP requests made, by target.", ["target"], registry=r,
        )
        self._messages = Counter(
            "vendue_auctioneer_nats_messages",
            "NATS messages sent or received, by kind.",
            ["kind"],
            registry=r,
        )
        self._bad_replies = Counter(
            "vendue_auctioneer_bad_replies",
            "Replies or requests that were not valid JSON of the expected model.",
            ["kind"],
            registry=r,
        )
        self._forged_states = Counter(
            "vendue_auctioneer_forged_states",
            "Cell states dropped because the rep process that sent them does not host the cell.",
            registry=r,
        )
        self._placements = Counter(
            "vendue_auctioneer_placements", "Items placed or failed.", ["kind", "outcome"], registry=r,
        )
        self._stale_refusals = Counter(
            "vendue_auctioneer_stale_token_refusals", "Work items reps refused for a stale fencing token.",
            registry=r,
        )
        self._stale_reports = Counter(
            "vendue_auctioneer_stale_reports", "Placement-failure reports the BBS refused (409) for an older "
            "fencing token.", registry=r,
        )
        self.http = HTTPMetrics(r)  # per route, refusals (common/http_metrics.py)
        self._cells_dropped = Counter(
            "vendue_auctioneer_cells_dropped", "Cells left out of an auction, by reason.", ["reason"],
            registry=r,
        )
        self.auctions = 0
        self.lrps_placed = 0
        self.lrps_failed = 0
        self.tasks_placed = 0
        self.tasks_failed = 0
        self.lrps_carried = 0
        self.tasks_carried = 0
        self.cells_dropped = 0
        self.requests_made = dict.fromkeys(REQUEST_TARGETS, 0)
        self.messages = dict.fromkeys(MESSAGE_KINDS, 0)
        self.bad_replies = 0
        self.forged_state_count = 0  # cell states a rep sent for a cell it does not host (dropped)
        self.last_auction_requests = 0
        self.last_auction_messages = 0
        self.last_state_fetch_seconds = 0.0
        self.last_auction_seconds = 0.0
        self.last_batch_size = 0
        self.last_auction_at = 0.0  # epoch seconds when the last auction completed (failover benchmark)
        self.stale_token_refusals = 0  # work items reps refused for carrying an older fencing token
        self.stale_reports = 0  # failure reports the BBS refused for an older fencing token

    def request(self, target: str, n: int = 1) -> None:
        self.requests_made[target] = self.requests_made.get(target, 0) + n
        self._requests.labels(target).inc(n)

    def message(self, kind: str, n: int = 1) -> None:
        self.messages[kind] = self.messages.get(kind, 0) + n
        self._messages.labels(kind).inc(n)

    def bad_reply(self, kind: str) -> None:
        self.bad_replies += 1
        self._bad_replies.labels(kind).inc()

    def forged_states(self, n: int = 1) -> None:
        self.forged_state_count += n
        self._forged_states.inc(n)

    def traffic(self) -> tuple[int, int]:
        """(HTTP requests, NATS messages) so far: an auction's share is the difference around it."""
        return sum(self.requests_made.values()), sum(self.messages.values())

    def auction_traffic(self, requests: int, messages: int) -> None:
        self.last_auction_requests = requests
        self.last_auction_messages = messages

    def state_fetch(self, seconds: float) -> None:
        self.last_state_fetch_seconds = seconds
        self._fetch_seconds.observe(seconds)

    def cell_dropped(self, reason: str) -> None:
        self.cells_dropped += 1
        self._cells_dropped.labels(reason).inc()

    def stale_token_refused(self, items: int) -> None:
        self.stale_token_refusals += items
        self._stale_refusals.inc(items)

    def stale_report(self) -> None:
        self.stale_reports += 1
        self._stale_reports.inc()

    def auction(self, batch_size: int, seconds: float) -> None:
        self.auctions += 1
        self.last_auction_at = time.time()
        self.last_batch_size = batch_size
        self.last_auction_seconds = seconds
        self._auctions.inc()
        self._batch_size.observe(batch_size)
        self._auction_seconds.observe(seconds)

    def placed(self, lrps: int, tasks: int) -> None:
        self.lrps_placed += lrps
        self.tasks_placed += tasks
        self._placements.labels("lrp", "placed").inc(lrps)
        self._placements.labels("task", "placed").inc(tasks)

    def failed(self, lrps: int, tasks: int) -> None:
        self.lrps_failed += lrps
        self.tasks_failed += tasks
        self._placements.labels("lrp", "failed").inc(lrps)
        self._placements.labels("task", "failed").inc(tasks)

    def carried(self, lrps: int, tasks: int) -> None:
        self.lrps_carried += lrps
        self.tasks_carried += tasks

    def stats(self) -> dict:
        """The JSON body of GET /v1/stats (the benchmark reads it)."""
        return {
            "auctions": self.auctions,
            "lrps_placed": self.lrps_placed,
            "lrps_failed": self.lrps_failed,
            "tasks_placed": self.tasks_placed,
            "tasks_failed": self.tasks_failed,
            "lrps_carried": self.lrps_carried,
            "tasks_carried": self.tasks_carried,
            "cells_dropped": self.cells_dropped,
            "requests_made": dict(self.requests_made),
            "messages": dict(self.messages),
            "bad_replies": self.bad_replies,
            "last_auction_requests": self.last_auction_requests,
            "last_auction_messages": self.last_auction_messages,
            "last_state_fetch_seconds": self.last_state_fetch_seconds,
            "last_auction_seconds": self.last_auction_seconds,
            "last_batch_size": self.last_batch_size,
            "last_auction_at": self.last_auction_at,
            "stale_token_refusals": self.stale_token_refusals,
            "stale_reports": self.stale_reports,
        }

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class DiegoAuctioneerMetrics(Collector):
    """Diego's auctioneer metrics, in Diego's units, read at scrape time from the plain counters above: what
    the auctions placed (Diego's "Started": instances placed on a cell) and failed to place, the last state
    fetch in nanoseconds, and whether this auctioneer holds the auctioneer lease (`leader()`)."""

    def __init__(self, metrics: Metrics, leader: Callable[[], bool]) -> None:
        self.metrics = metrics
        self.leader = leader

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        m = self.metrics
        for name, value, documentation in (
            ("AuctioneerLRPAuctionsStarted", m.lrps_placed, "LRP instances the auctions placed on cells"),
            ("AuctioneerLRPAuctionsFailed", m.lrps_failed, "LRP instances the auctions could not place"),
            ("AuctioneerTaskAuctionsStarted", m.tasks_placed, "Tasks the auctions placed on cells"),
            ("AuctioneerTaskAuctionsFailed", m.tasks_failed, "Tasks the auctions could not place"),
        ):
            yield CounterMetricFamily(name, documentation, value=value)
        yield GaugeMetricFamily("AuctioneerFetchStatesDuration", "Nanoseconds the last auction took to fetch "
                                "every cell's state (0 before the first)",
                                value=round(m.last_state_fetch_seconds * NANOSECONDS))
        held = GaugeMetricFamily("LockHeld", "1 while this process holds the lease", labels=["lease"])
        held.add_metric(["auctioneer"], 1 if self.leader() else 0)
        yield held
