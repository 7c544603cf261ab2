"""Fetching the bids over NATS: a request on `vendue.cells.state.<rep_id>` to every rep process the BBS
names, each with a reply subject of its own (`<inbox>.<n>`), gathered on one wildcard subscription by a
deadline.

The BBS says which cells are present (GET /v1/cells) and which process hosts each, so the gather knows
whom to ask and whom to wait for: it ends as soon as every present, non-evacuating cell has answered, or
at `cell_state_timeout`. A cell that did not answer drops out of this auction ("timeout"), as with HTTP.
An auction over 100 rep processes costs 100 + 100 messages on one connection (the publishes go out in one
write) instead of 100 HTTP round trips.

Who answered is the reply subject, never anything the sender writes: only the rep the request was for may
subscribe to its subject, and a rep may publish only to the reply subject of a request it was delivered
(NATS permissions, docs/security.md). A reply speaks only for the cells the BBS lists under that process;
a state for any other cell is dropped and counted (`forged_states`): a compromised rep cannot report
another's cells full, empty or evacuating.

A reply that is not a HostCellStates (not JSON, or not the model) is logged, counted in `bad_replies` and
the cells of its process dropped ("invalid_state") at once rather than at the deadline. So are the cells
of a process no one serves (the server's "no responders" status reply: "unreachable"), such as a stopped
rep's.
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
from common.transport.subjects import cells_state_subject

from .cells import FetchedCells, RepAddress, left_out
from .metrics import Metrics

log = logging.getLogger("auctioneer.nats_cells")

ListCells = Callable[[], Awaitable[list[CellPresence]]]
Unusable = tuple[str, str]  # (reason, detail): why a cell's answer leaves it out of the auction
NO_RESPONDERS_STATUS = "503"  # nats-server's status reply to a request no one is subscribed to


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
        answered: dict[str, CellState | Unusable] = {}  # cell_id -> its state, or why it is unusable
        waiting = set(expected)
        complete = asyncio.Event()
        # The processes to ask, in a fixed order: a reply's last subject token is its process's index.
        # A cell whose presence names no process has no subject to be asked on: it waits out the deadline.
        rep_ids = sorted({p.rep_id for p in expected.values() if p.rep_id})
        cells_of: dict[str, set[str]] = {rep_id: set() for rep_id in rep_ids}
        for cell_id, presence in expected.items():
            if presence.rep_id:
                cells_of[presence.rep_id].add(cell_id)

        async def on_reply(msg: Msg) -> None:
            self._metrics.message("state_reply")
            rep_id = _rep_of(msg.subject, rep_ids)
            if rep_id is None:
                return  # not a subject this gather sent: nobody may publish there but a replying rep
            if _no_responders(msg):  # the server's word: no process is subscribed to that rep's subject
                outcomes: list[tuple[str, CellState | Unusable]] = [
                    (cell_id, ("unreachable", "no rep process subscribed")) for cell_id in cells_of[rep_id]]
            else:
                outcomes = self._read(msg, rep_id, cells_of[rep_id])
            for cell_id, outcome in outcomes:
                if cell_id in waiting:  # not: a duplicate
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
            sub = await nc.subscribe(inbox + ".*", cb=on_reply)
            for index, rep_id in enumerate(rep_ids):  # buffered: one write for all of them
                await nc.publish(cells_state_subject(rep_id), b"", reply=f"{inbox}.{index}")
            self._metrics.message("state_request", len(rep_ids))
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
            else:
                self._drop(result, cell_id, *outcome)

    def _read(self, msg: Msg, rep_id: str, its_cells: set[str]) -> list[tuple[str, CellState | Unusable]]:
        """(cell, its state or why it is unusable) for every cell of `rep_id`, the process the reply
        subject says answered, that the reply speaks for."""
        try:
            states = HostCellStates.model_validate_json(msg.data).cells
        except ValidationError as exc:
            self._metrics.bad_reply("state")
            log.warning("unreadable state reply", extra={"data": {
                "rep_id": rep_id, "errors": exc.error_count(), "bytes": len(msg.data), "head": msg.data[:80],
            }})
            why = ("invalid_state", f"invalid state body: {exc.error_count()} errors")
            return [(cell_id, why) for cell_id in its_cells]
        forged = [s.cell_id for s in states if s.cell_id not in its_cells]
        if forged:
            # A state for a cell the BBS does not list under this process: a compromised or misconfigured
            # rep speaking for another's cells (or for a cell the BBS does not list at all).
            self._metrics.forged_states(len(forged))
            log.warning("state reply for cells of another process dropped", extra={"data": {
                "rep_id": rep_id, "cells": forged[:10], "count": len(forged),
            }})
        return [(s.cell_id, _usable(s)) for s in states if s.cell_id in its_cells]

    def _drop(self, result: FetchedCells, cell_id: str, reason: str, detail: str) -> None:
        result.dropped[cell_id] = detail
        self._metrics.cell_dropped(reason)


def _usable(state: CellState) -> CellState | Unusable:
    if state.evacuating:
        return ("evacuating", "evacuating")
    if state.cordoned:
        return ("cordoned", "cordoned")
    return state


def _no_responders(msg: Msg) -> bool:
    return not msg.data and (msg.headers or {}).get("Status") == NO_RESPONDERS_STATUS


def _rep_of(subject: str, rep_ids: list[str]) -> str | None:
    """The process a reply subject `<inbox>.<n>` was sent to (None: not one of ours)."""
    token = subject.rsplit(".", 1)[-1]
    if not (token.isascii() and token.isdigit()) or str(int(token)) != token:
        return None
    index = int(token)
    return rep_ids[index] if index < len(rep_ids) else None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
