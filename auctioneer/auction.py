"""One auction: fetch the bids, run the engine, send each winning cell its work, report to the BBS (its
failures, what each cell accepted, its durations and its placement explanations: one request).

Returns the work to carry into the next batch (what reps rejected, with tries left).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from common.models import AuctionReport, CellState
from placement import schedule
from placement.placement_trace import PlacementTrace
from placement.types import AuctionResult, Failure, SchedulerConfig

from .batcher import Batch, PendingLRP, PendingTask
from .cells import FetchedCells
from .convert import cell_from_state, lrp_starts, placement_failures, task_starts
from .dispatch import group_work, split_rejections
from .metrics import Metrics
from .reporter import PlacementReporter
from .settings import DEFAULT_EXPLANATIONS
from .transport import CellStateSource, WorkSender

log = logging.getLogger("auctioneer.auction")
# Placement failures logged one by one per auction, each with its instance: an auction of 10,000 instances
# that do not fit would otherwise write 10,000 lines; the auction's own line counts them all.
FAILURES_LOGGED = 10

STALE_TOKEN_REASON = "stale fencing token"  # how rep/cell.py words the refusal


@dataclass(slots=True, frozen=True)
class AuctionConfig:
    strategy: str = "diego"
    engine: str = "fast"
    max_inflight_starts: int = 0
    max_attempts: int = 3
    thread_threshold: int = 500  # batches at least this large are scheduled in a worker thread
    # instances per auction explained to the BBS (placement_trace.py); 0: none
    explanations: int = DEFAULT_EXPLANATIONS
    cache_weight: float = 0.0  # the diego strategy's cache term (placement/scoring.py); 0: Diego's scores


class Auction:
    def __init__(
        self,
        fetcher: CellStateSource,
        dispatcher: WorkSender,
        reporter: PlacementReporter,
        metrics: Metrics,
        config: AuctionConfig,
    ) -> None:
        self._fetcher = fetcher
        self._dispatcher = dispatcher
        self._reporter = reporter
        self._metrics = metrics
        self._config = config

    async def run(self, batch: Batch) -> Batch:
        started = time.perf_counter()
        requests_before, messages_before = self._metrics.traffic()
        fetched = await self._fetcher.fetch()
        lrp_items = list(batch.lrps.values())
        scheduled = time.perf_counter()
        result, trace = await self._schedule(fetched.states, lrp_items, list(batch.tasks.values()))
        failures = [_annotate(f, fetched) for f in result.failures]

        dispatched = time.perf_counter()
        outcome = await self._dispatcher.send(group_work(result, batch, fetched.reps))
        dispatch_seconds = time.perf_counter() - dispatched
        stale = sum(1 for r in outcome.rejections if r.reason.startswith(STALE_TOKEN_REASON))
        if stale:  # a newer leader has reached these reps: this auctioneer's lease is (about to be) gone
            self._metrics.stale_token_refused(stale)
        carried, exhausted = split_rejections(outcome.rejections, self._config.max_attempts)
        failures += exhausted
        seconds = time.perf_counter() - started
        lrps_failed = sum(1 for f in failures if f.task_guid is None)
        report = AuctionReport(
            **dict(placement_failures(failures, outcome.accepted)),
            duration_s=seconds,
            fetch_states_s=fetched.seconds,
            lrps_placed=outcome.lrps_placed,
            lrps_failed=lrps_failed,
            tasks_placed=outcome.tasks_placed,
            tasks_failed=len(failures) - lrps_failed,
            finished_at=time.time(),
        )
        explanations: list[dict[str, Any]] = []
        if trace is not None:
            rejected = {r.item.key for r in outcome.rejections if isinstance(r.item, PendingLRP)}
            explanations = await self._explain(trace, rejected, [f for f in exhausted if f.task_guid is None])
        self._reporter.report_auction(report, explanations)

        requests_after, messages_after = self._metrics.traffic()
        requests, messages = requests_after - requests_before, messages_after - messages_before
        self._metrics.auction_traffic(requests, messages)
        self._metrics.auction(len(batch), seconds)
        self._metrics.placed(outcome.lrps_placed, outcome.tasks_placed)
        self._metrics.failed(lrps_failed, len(failures) - lrps_failed)
        self._metrics.carried(len(carried.lrps), len(carried.tasks))
        log.info(
            "auction",
            extra={"data": {
                "lrps": len(batch.lrps), "tasks": len(batch.tasks), "cells": len(fetched.states),
                "cells_dropped": len(fetched.dropped), "lrps_placed": outcome.lrps_placed,
                "tasks_placed": outcome.tasks_placed, "failed": len(failures), "carried": len(carried),
                "state_fetch_s": round(fetched.seconds, 4), "schedule_s": round(dispatched - scheduled, 4),
                "dispatch_s": round(dispatch_seconds, 4), "auction_s": round(seconds, 4),
                "requests": requests, "messages": messages,
            }},
        )
        _log_failures(failures)
        return carried

    async def _schedule(
        self, states: list[CellState], lrps: list[PendingLRP], tasks: list[PendingTask]
    ) -> tuple[AuctionResult, PlacementTrace | None]:
        c = self._config
        config = SchedulerConfig(
            strategy=c.strategy, engine=c.engine, max_inflight_starts=c.max_inflight_starts,
            cache_weight=c.cache_weight,
        )
        trace = PlacementTrace(c.explanations) if c.explanations and lrps else None
        size = len(lrps) + len(tasks) + sum(len(s.lrp_counts) for s in states)
        if size >= c.thread_threshold:
            # Conversion and the engine are pure CPU; in a thread the event loop still gets the GIL
            # often enough to answer the API.
            return await asyncio.to_thread(_convert_and_schedule, states, lrps, tasks, config, trace), trace
        return _convert_and_schedule(states, lrps, tasks, config, trace), trace

    async def _explain(self, trace: PlacementTrace, rejected: set[tuple[str, int]],
                       exhausted: list[Failure]) -> list[dict[str, Any]]:
        """The auction's placement explanations, worked out now that its work is on its way (the scores
        are computed here, not while placing). Those of instances a rep rejected are left out: carried to
        the next auction, or failed (`exhausted`, explained by their failure)."""
        def explained() -> list[dict[str, Any]]:
            kept = [e for e in trace.explanations() if (e["process_guid"], e["index"]) not in rejected]
            kept.extend({"process_guid": f.process_guid, "index": f.index, "placed": False, "error": f.error,
                         "detail": f.detail} for f in exhausted[:max(0, trace.limit - len(kept))])
            return kept

        if len(trace.placed_records) >= self._config.thread_threshold:
            return await asyncio.to_thread(explained)
        return explained()


def _convert_and_schedule(
    states: list[CellState], lrps: list[PendingLRP], tasks: list[PendingTask], config: SchedulerConfig,
    trace: PlacementTrace | None = None,
) -> AuctionResult:
    return schedule([cell_from_state(s) for s in states], lrp_starts(lrps), task_starts(tasks), config, trace)


def _annotate(failure: Failure, fetched: FetchedCells) -> Failure:
    """Say why cells were missing from the auction, so `0 cells present` is not a mystery."""
    if fetched.error:
        note = fetched.error
    elif fetched.dropped:
        reasons = Counter(fetched.dropped.values())
        note = f"{len(fetched.dropped)} cells left out: " + ", ".join(
            f"{n} {r}" for r, n in reasons.most_common(3)
        )
    else:
        return failure
    detail = f"{failure.detail}; {note}" if failure.detail else note
    return Failure(failure.error, detail, failure.process_guid, failure.index, failure.task_guid)


def _log_failures(failures: list[Failure]) -> None:
    """A line per failure, the first FAILURES_LOGGED, each naming its instance (or task)."""
    for f in failures[:FAILURES_LOGGED]:
        who = ({"process_guid": f.process_guid, "index": f.index} if f.task_guid is None
               else {"task_guid": f.task_guid})
        log.info("placement failed", extra={"data": {**who, "error": f.error, "detail": f.detail}})
