"""Fetching the bids over NATS: one request on `vendue.cells.state`, every rep answers, gather by a deadline.

The BBS still says which cells are present (GET /v1/cells), so the gather knows whom to wait for: it ends
as soon as every present, non-evacuating cell has answered, or at `cell_state_timeout`. A cell that did not
answer drops out of this auction ("timeout"), as with HTTP. One publish replaces N requests: an auction
over 100 cells costs 1 + 100 messages on one connection instead of 100 HTTP round trips.

A reply that is not a CellState (not JSON, or not the model) is logged, counted in `bad_replies` and its
cell dropped ("invalid_state"). Replies name their cell in a header, so even garbage is attributed and
does not hold the gather open until the deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from pydantic import ValidationError

from common.models import CellPresence, CellState
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import CELL_ID_HEADER, CELLS_STATE

from .cells import FetchedCells
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
            if presence.evacuating:
                self._drop(result, presence.cell_id, "evacuating", "evacuating")
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
            cell_id, outcome = self._read(msg)
            if cell_id is None or cell_id not in waiting:
                return  # unattributable garbage (counted), a cell the BBS does not list, or a duplicate
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
                result.rep_urls[cell_id] = presence.rep_url.rstrip("/")
            elif outcome is None:
                self._drop(result, cell_id, "timeout", f"no state within {self._timeout:g} s")
            elif outcome == "evacuating":
                self._drop(result, cell_id, "evacuating", "evacuating")
            else:
                self._drop(result, cell_id, "invalid_state", outcome)

    def _read(self, msg: Msg) -> tuple[str | None, CellState | str]:
        """(the cell the reply is from, its state or why it is unusable)."""
        named = (msg.headers or {}).get(CELL_ID_HEADER)
        try:
            state = CellState.model_validate_json(msg.data)
        except ValidationError as exc:
            cell_id = named or _cell_id_of(msg.data)
            self._metrics.bad_reply("state")
            log.warning("unreadable state reply", extra={"data": {
                "cell_id": cell_id, "errors": exc.error_count(), "bytes": len(msg.data), "head": msg.data[:80],
            }})
            return cell_id, f"invalid state body: {exc.error_count()} errors"
        if named is not None and named != state.cell_id:
            self._metrics.bad_reply("state")
            log.warning("state reply names another cell", extra={"data": {"header": named, "body": state.cell_id}})
            return named, f"state names cell {state.cell_id!r}"
        if state.evacuating:
            return state.cell_id, "evacuating"
        return state.cell_id, state

    def _drop(self, result: FetchedCells, cell_id: str, reason: str, detail: str) -> None:
        result.dropped[cell_id] = detail
        self._metrics.cell_dropped(reason)


def _cell_id_of(body: bytes) -> str | None:
    """The `cell_id` of a JSON object that is otherwise not a CellState (None if there is none)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    value = data.get("cell_id") if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
