"""Fetching the bids: present cells from the BBS, then every rep process's state concurrently.

Every cell's presence names the rep process hosting it (`rep_url`, its root URL, and `rep_id`). The
cells of one process are asked together with ONE GET {rep_url}/state?lrps=counts, which answers every
hosted cell's state (rep/api.py): 4 requests per auction for 1,000 cells in 4 processes, 1 per cell for
reps hosting one cell each (VMs, as in Diego).

The whole fetch ends by one deadline (`cell_state_timeout` after it starts), as in Diego: a cell that
is missing from its process's answer, or says it is evacuating, drops out of this auction (as does one the
BBS lists evacuating or cordoned, without asking its rep); a request
that fails, times out or answers an invalid body drops every cell of that process, each with that reason.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import httpx
from pydantic import BaseModel, ValidationError

from common.models import CellPresence, CellState, HostCellStates

from .clients import RepClients, RepUnreachable
from .metrics import Metrics

log = logging.getLogger("auctioneer.cells")


class _CellList(BaseModel):
    items: list[CellPresence]


class RepAddress(NamedTuple):
    """Where the rep process hosting a cell answers: its root URL (HTTP) and its id (NATS subjects)."""

    url: str
    rep_id: str

    @classmethod
    def of(cls, presence: CellPresence) -> RepAddress:
        return cls(presence.rep_url.rstrip("/"), presence.rep_id)


@dataclass(slots=True)
class FetchedCells:
    states: list[CellState] = field(default_factory=list)
    reps: dict[str, RepAddress] = field(default_factory=dict)  # cell_id -> its rep process, for the work
    dropped: dict[str, str] = field(default_factory=dict)  # cell_id -> why it is not in this auction
    error: str = ""  # set when the BBS could not list the cells
    seconds: float = 0.0


class _Dropped(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail or reason


def left_out(presence: CellPresence) -> str:
    """Why a present cell takes no part in auctions, without asking its rep ("" when it does): its rep
    evacuates it, or the operator cordoned it (vendue cells cordon|drain: the BBS says so)."""
    if presence.evacuating:
        return "evacuating"
    return "cordoned" if presence.cordoned or presence.draining else ""


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
            if why := left_out(presence):
                self._drop(result, presence.cell_id, _Dropped(why))
            else:
                candidates[presence.cell_id] = presence
        by_rep: dict[str, list[CellPresence]] = {}  # rep_url -> its candidate cells
        for presence in candidates.values():
            by_rep.setdefault(presence.rep_url.rstrip("/"), []).append(presence)
        deadline = asyncio.get_running_loop().time() + self._timeout
        limit = asyncio.Semaphore(self._max_concurrency)
        outcomes = await asyncio.gather(
            *(self._fetch_rep(url, cells, deadline, limit) for url, cells in by_rep.items()),
            return_exceptions=True,
        )
        by_cell: dict[str, CellState | _Dropped | BaseException] = {}
        for cells, rep_outcome in zip(by_rep.values(), outcomes, strict=True):
            if isinstance(rep_outcome, BaseException):  # the request failed: each of its cells drops with why
                by_cell.update((p.cell_id, rep_outcome) for p in cells)
            else:
                by_cell.update(zip((p.cell_id for p in cells), rep_outcome, strict=True))
        for presence in candidates.values():  # in the BBS's order, whichever request answered
            outcome = by_cell[presence.cell_id]
            if isinstance(outcome, CellState):
                result.states.append(outcome)
                result.reps[outcome.cell_id] = RepAddress.of(presence)
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

    async def _fetch_rep(
        self, rep_url: str, cells: list[CellPresence], deadline: float, limit: asyncio.Semaphore
    ) -> list[CellState | _Dropped]:
        """Every cell of one rep process in one request: each cell's state, or why it drops out. Asks for
        all the process's cells (a short URL whatever their number); states of cells not asked about are
        ignored."""
        content = await self._get_state(rep_url + "/state?lrps=counts", deadline, limit,
                                        [p.cell_id for p in cells])
        try:
            states = {s.cell_id: s for s in HostCellStates.model_validate_json(content).cells}
        except ValidationError as exc:
            raise _Dropped("invalid_state", f"invalid state body: {exc.error_count()} errors") from None
        outcomes: list[CellState | _Dropped] = []
        for presence in cells:
            state = states.get(presence.cell_id)
            if state is None:
                outcomes.append(_Dropped("missing", f"not in the state answer of its rep {rep_url}"))
            elif state.evacuating:
                outcomes.append(_Dropped("evacuating"))
            elif state.cordoned:  # the rep heard of it before the cell list said so
                outcomes.append(_Dropped("cordoned"))
            else:
                outcomes.append(state)
        return outcomes

    async def _get_state(
        self, url: str, deadline: float, limit: asyncio.Semaphore, cells: list[str]
    ) -> bytes:
        """One state request to the rep of `cells` within the fetch's deadline: the body of a 200, or why it
        failed."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(deadline):
                async with limit:
                    self._metrics.request("rep_state")
                    left = max(0.001, deadline - loop.time())
                    response = await self._reps.get(url, timeout=left, cells=cells)
        except TimeoutError:
            raise _Dropped("timeout", f"no state within {self._timeout:g} s") from None
        except RepUnreachable as exc:
            raise _Dropped("unreachable", str(exc)) from None
        if response.status_code != 200:
            raise _Dropped("bad_status", f"state answered {response.status_code}")
        return response.content

    def _drop(self, result: FetchedCells, cell_id: str, why: _Dropped) -> None:
        result.dropped[cell_id] = why.detail
        self._metrics.cell_dropped(why.reason)
        log.debug("cell left out of the auction", extra={"data": {"cell_id": cell_id, "reason": why.detail}})


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
