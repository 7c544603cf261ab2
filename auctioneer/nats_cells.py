"""Fetching the bids over NATS: one request on `vendue.cells.state`, every rep process answers once
(HostCellStates of its live cells), gathered by a deadline.

The BBS still says which cells are present (GET /v1/cells), so the gather knows whom to wait for: it ends
as soon as every present, non-evacuating cell has answered, or at `cell_state_timeout`. A cell that did not
answer drops out of this auction ("timeout"), as with HTTP. One publish replaces N requests: an auction
over 100 rep processes costs 1 + 100 messages on one connection instead of 100 HTTP round trips.

A reply that is not a HostCellStates (not JSON, or not the model) is logged, counted in `bad_replies` and
the cells of its process dropped ("invalid_state"): replies name their rep process in a header, so even
garbage is attributed and does not hold the gather open until the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from pydantic import ValidationError

from common.models import CellPresence, CellState, HostCellStates
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import CELLS_STATE, REP_ID_HEADER

from .cells import FetchedCells, RepAddress, left_out
from .metrics import Metrics

log = logging.getLogger("auctioneer.nats_cells")

ListCells = Callable[[], Awaitable[list[CellPresence]]]


class NatsCellStateSource:
    def __init__(
        self,
        nats: NatsConnection,
        list_cells: ListCells,
        metrics: Metrics,
        *,
        timeout: float = 5.0,
    ) -> None:
        self._nats = nats
        self._list_cells = list_cells
        self._metrics = metrics
        self._timeout = timeout

    async def fetch(self) -> FetchedCells:
        started = time.perf_counter()
        result = FetchedCells()
        try:
            presences = await self._list_cells()
        except Exception as exc:  # httpx or validation errors: no cell list, no auction over cells
            result.error = f"cell list unavailable: {_describe(exc)}"
            log.warning("could not list cells", extra={"data": {"error": result.error}})
            return result
        expected: dict[str, CellPresence] = {}
        for presence in presences:
            if why := left_out(presence):
                self._drop(result, presence.cell_id, why, why)
            else:
                expected[presence.cell_id] = presence
        if expected:
            await self._gather(expected, result, deadline=asyncio.get_running_loop().time() + self._timeout)
        result.seconds = time.perf_counter() - started
        self._metrics.state_fetch(result.seconds)
        if result.dropped:
            reasons = Counter(result.dropped.values()).most_common(5)
            log.info("cells left out of the auction", extra={"data": {
                "dropped": len(result.dropped), "present": len(presences), "reasons": dict(reasons),
            }})
        return result

    async def _gather(self, expected: dict[str, CellPresence], result: FetchedCells, deadline: float) -> None:
        loop = asyncio.get_running_loop()
        answered: dict[str, CellState | str] = {}  # cell_id -> its state, or why it is unusable
        waiting = set(expected)
        complete = asyncio.Event()

        async def on_reply(msg: Msg) -> None:
            self._metrics.message("state_reply")
            for cell_id, outcome in self._read(msg, expected):
                if cell_id in waiting:  # not: a cell the BBS does not list, or a duplicate
                    waiting.discard(cell_id)
                    answered[cell_id] = outcome
            if not waiting:
                complete.set()

        # A NATS restart in progress: wait for the reconnect within the same deadline rather than
        # dropping every cell at once.
        if not await self._nats.until_connected(deadline - loop.time()):
            for cell_id in expected:
                self._drop(result, cell_id, "unreachable", "NATS not connected")
            return
        nc = self._nats.client
        inbox = nc.new_inbox()
        try:
            sub = await nc.subscribe(inbox, cb=on_reply)
            await nc.publish(CELLS_STATE, b"", reply=inbox)
            self._metrics.message("state_request")
        except Exception as exc:  # disconnected between the check and the publish
            for cell_id in expected:
                self._drop(result, cell_id, "unreachable", f"state request not sent: {_describe(exc)}")
            return
        try:
            await asyncio.wait_for(complete.wait(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            pass
        finally:
            try:
                await sub.unsubscribe()
            except Exception:  # the connection dropped meanwhile: the server forgets the inbox anyway
                log.debug("state inbox unsubscribe failed", exc_info=True)
        for cell_id, presence in expected.items():
            outcome = answered.get(cell_id)
            if isinstance(outcome, CellState):
                result.states.append(outcome)
                result.reps[cell_id] = RepAddress.of(presence)
            elif outcome is None:
                self._drop(result, cell_id, "timeout", f"no state within {self._timeout:g} s")
            elif outcome in ("evacuating", "cordoned"):
                self._drop(result, cell_id, outcome, outcome)
            else:
                self._drop(result, cell_id, "invalid_state", outcome)

    def _read(self, msg: Msg, expected: dict[str, CellPresence]) -> list[tuple[str, CellState | str]]:
        """(cell, its state or why it is unusable) for every cell a reply speaks for."""
        rep_id = (msg.headers or {}).get(REP_ID_HEADER)
        try:
            states = HostCellStates.model_validate_json(msg.data).cells
        except ValidationError as exc:
            self._metrics.bad_reply("state")
            log.warning("unreadable state reply", extra={"data": {
                "rep_id": rep_id, "errors": exc.error_count(), "bytes": len(msg.data), "head": msg.data[:80],
            }})
            why = f"invalid state body: {exc.error_count()} errors"
            return [(cell_id, why) for cell_id, p in expected.items()
                    if rep_id is not None and p.rep_id == rep_id]
        # Only the process the BBS names for a cell speaks for it: another process's cell's state is ignored.
        return [(s.cell_id, "evacuating" if s.evacuating else "cordoned" if s.cordoned else s) for s in states
                if s.cell_id in expected and expected[s.cell_id].rep_id == rep_id]

    def _drop(self, result: FetchedCells, cell_id: str, reason: str, detail: str) -> None:
        result.dropped[cell_id] = detail
        self._metrics.cell_dropped(reason)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
