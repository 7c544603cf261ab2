"""Fetching the bids: present cells from the BBS, then every cell's /state concurrently.

The whole fetch ends by one deadline (`cell_state_timeout` after it starts), as in Diego: a cell that
fails, times out, answers with an invalid body or says it is evacuating drops out of this auction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
from pydantic import BaseModel, ValidationError

from common.models import CellPresence, CellState

from .clients import RepClients, RepUnreachable
from .metrics import Metrics

log = logging.getLogger("auctioneer.cells")


class _CellList(BaseModel):
    items: list[CellPresence]


@dataclass(slots=True)
class FetchedCells:
    states: list[CellState] = field(default_factory=list)
    rep_urls: dict[str, str] = field(default_factory=dict)  # cell_id -> the rep_url the state came from
    dropped: dict[str, str] = field(default_factory=dict)  # cell_id -> why it is not in this auction
    error: str = ""  # set when the BBS could not list the cells
    seconds: float = 0.0


class _Dropped(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail or reason


class CellFetcher:
    def __init__(
        self,
        bbs: httpx.AsyncClient,
        reps: RepClients,
        metrics: Metrics,
        *,
        timeout: float = 5.0,
        bbs_timeout: float = 5.0,
        max_concurrency: int = 256,
    ) -> None:
        self._bbs = bbs
        self._reps = reps
        self._metrics = metrics
        self._timeout = timeout
        self._bbs_timeout = bbs_timeout
        self._max_concurrency = max_concurrency

    async def present_cells(self) -> list[CellPresence]:
        self._metrics.request("bbs")
        response = await self._bbs.get("/v1/cells", timeout=self._bbs_timeout)
        response.raise_for_status()
        return _CellList.model_validate_json(response.content).items

    async def fetch(self) -> FetchedCells:
        started = time.perf_counter()
        result = FetchedCells()
        try:
            presences = await self.present_cells()
        except (httpx.HTTPError, ValidationError) as exc:
            result.error = f"cell list unavailable: {_describe(exc)}"
            log.warning("could not list cells", extra={"data": {"error": result.error}})
            return result
        candidates: dict[str, CellPresence] = {}
        for presence in presences:
            if presence.evacuating:
                self._drop(result, presence.cell_id, _Dropped("evacuating"))
            else:
                candidates[presence.cell_id] = presence
        deadline = asyncio.get_running_loop().time() + self._timeout
        limit = asyncio.Semaphore(self._max_concurrency)
        outcomes = await asyncio.gather(
            *(self._fetch_one(p, deadline, limit) for p in candidates.values()), return_exceptions=True
        )
        for presence, outcome in zip(candidates.values(), outcomes, strict=True):
            if isinstance(outcome, CellState):
                result.states.append(outcome)
                result.rep_urls[outcome.cell_id] = presence.rep_url.rstrip("/")
            elif isinstance(outcome, _Dropped):
                self._drop(result, presence.cell_id, outcome)
            else:  # an unexpected error: still only this cell drops out
                self._drop(result, presence.cell_id, _Dropped("error", _describe(outcome)))
        result.seconds = time.perf_counter() - started
        self._metrics.state_fetch(result.seconds)
        if result.dropped:  # one line per auction, not one per cell: a thousand cells may drop at once
            reasons = Counter(result.dropped.values()).most_common(5)
            log.info("cells left out of the auction", extra={"data": {
                "dropped": len(result.dropped), "present": len(presences), "reasons": dict(reasons),
            }})
        return result

    async def _fetch_one(self, presence: CellPresence, deadline: float, limit: asyncio.Semaphore) -> CellState:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(deadline):
                async with limit:
                    self._metrics.request("rep_state")
                    response = await self._reps.get(
                        presence.rep_url.rstrip("/") + "/state?lrps=counts", timeout=max(0.001, deadline - loop.time())
                    )
        except TimeoutError:
            raise _Dropped("timeout", f"no state within {self._timeout:g} s") from None
        except RepUnreachable as exc:
            raise _Dropped("unreachable", str(exc)) from None
        if response.status_code != 200:
            raise _Dropped("bad_status", f"state answered {response.status_code}")
        try:
            state = CellState.model_validate_json(response.content)
        except ValidationError as exc:
            raise _Dropped("invalid_state", f"invalid state body: {exc.error_count()} errors") from None
        if state.cell_id != presence.cell_id:
            raise _Dropped("invalid_state", f"state names cell {state.cell_id!r}")
        if state.evacuating:
            raise _Dropped("evacuating")
        return state

    def _drop(self, result: FetchedCells, cell_id: str, why: _Dropped) -> None:
        result.dropped[cell_id] = why.detail
        self._metrics.cell_dropped(why.reason)
        log.debug("cell left out of the auction", extra={"data": {"cell_id": cell_id, "reason": why.detail}})


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
