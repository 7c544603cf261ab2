"""Telling the BBS how an auction went: one POST /v1/auctions per auction, with what could not be placed
and what each cell accepted (the BBS does not auction accepted work again while its claim is on the way:
bbs/placements.py), its durations and counts (the event auction_completed) and its placement explanations
(`vendue why`). Over HTTP whatever the transport.

Sent in the background so the next auction need not wait on the BBS; retried a few times with
common/retry.py's jittered backoff. If the BBS stays down the report is dropped with a log line: its
convergence re-auctions UNCLAIMED LRPs and PENDING tasks, so nothing is lost, only the placement_error
text (and, for a claim later than the staleness limit, the knowledge that a cell had accepted it).

Each report carries the fencing token of the auction it comes from (the lease's, read when the auction
reports: the batcher abandons an auction the moment its lease is lost, so that is the auction's term). The
BBS answers 409 to a token older than the lease's current one: a newer leader is auctioning the same work,
so the report is dropped with one log line and never retried.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import httpx

from common.models import AuctionReport
from common.retry import AUCTION_REPORTS, Again, retrying

from .metrics import Metrics

log = logging.getLogger("auctioneer.reporter")


class _Refused(Exception):
    """The BBS refused the report's body (4xx other than 409): not worth another attempt."""


class PlacementReporter(Protocol):
    """Where an auction's outcome goes: the BBS (FailureReporter), or the simulator's in-process record."""

    def report_auction(self, report: AuctionReport, explanations: Sequence[dict[str, Any]] = ()) -> object:
        ...


class FailureReporter:
    def __init__(
        self,
        bbs: httpx.AsyncClient,
        metrics: Metrics,
        *,
        timeout: float = 5.0,
        attempts: int = 4,
        backoff: float = AUCTION_REPORTS.first_s,  # the first delay; common/retry.py's jitter and cap
        fencing_token: Callable[[], int] = lambda: 0,
    ) -> None:
        self._bbs = bbs
        self._fencing_token = fencing_token
        self._metrics = metrics
        self._timeout = timeout
        self._attempts = attempts
        self._backoff = backoff
        self._inflight: set[asyncio.Task[bool]] = set()

    def report_auction(self, report: AuctionReport, explanations: Sequence[dict[str, Any]] = ()
                       ) -> asyncio.Task[bool]:
        """Start sending the auction's report; returns the task. `explanations`: plain data from the
        placement trace, encoded as they are (the BBS validates them)."""
        body = report.model_dump(mode="json")
        body.update(explanations=list(explanations), fencing_token=self._fencing_token())
        task = asyncio.create_task(self.send(body), name="report-auction")
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return task

    async def send(self, report: dict[str, Any]) -> bool:
        """POST /v1/auctions with bounded retries; False when the BBS refused or stayed unreachable."""
        body = json.dumps(report).encode()
        why = ""
        policy = dataclasses.replace(AUCTION_REPORTS, first_s=self._backoff)
        try:
            async for attempt in retrying(policy, attempts=self._attempts):
                with attempt:
                    return await self._post(body, report)
        except (Again, _Refused) as exc:  # still failing after the last attempt, or refused for good
            why = str(exc)
        log.warning("auction report dropped", extra={"data": {**_counts(report), "why": why}})
        return False

    async def _post(self, body: bytes, report: dict[str, Any]) -> bool:
        """One attempt: True when taken, False when refused for good (409); Again when worth retrying."""
        try:
            self._metrics.request("bbs")
            response = await self._bbs.post(
                "/v1/auctions", content=body, headers={"content-type": "application/json"},
                timeout=self._timeout,
            )
        except httpx.HTTPError as exc:
            raise Again(f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc
        if response.is_success:
            return True
        if response.status_code == 409:
            self._metrics.stale_report()
            log.warning(
                "auction report refused: a newer auctioneer holds the lease",
                extra={
                    "data": {
                        **_counts(report),
                        "fencing_token": report["fencing_token"],
                        "bbs": response.text[:200],
                    }
                },
            )
            return False
        why = f"BBS answered {response.status_code}"
        if response.status_code < 500:  # the BBS refused this body: sending it again will not help
            raise _Refused(why)
        raise Again(why)

    async def drain(self, timeout: float) -> None:
        """Wait (bounded) for reports still in flight; cancel what remains."""
        if not self._inflight:
            return
        pending = set(self._inflight)
        _, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            task.cancel()
        if still:
            await asyncio.gather(*still, return_exceptions=True)


def _counts(report: dict[str, Any]) -> dict[str, int]:
    return {
        "lrps": len(report["lrps"]),
        "tasks": len(report["tasks"]),
        "cells_accepted": len(report["accepted"]),
        "explanations": len(report["explanations"]),
    }
