"""Test doubles of rep processes on NATS: each answers the state request on vendue.cells.state.<rep_id>
once for its cells and takes work on vendue.rep.<rep_id>.work, recording both.

A process can answer normally, with garbage ("garbage": not JSON), with JSON that is not a HostCellStates
("invalid"), not at all ("silent"), or with the states of every other process's cells besides its own
("forge": a compromised rep speaking for others), to exercise the auctioneer's handling of each; a cell's
work can be rejected ("reject").
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from common.models import (
    CellPresence,
    CellState,
    HostCellStates,
    HostWork,
    HostWorkResult,
    LRPWork,
    WorkResult,
)
from common.transport.subjects import cells_state_subject, rep_subject
from tests.auctioneer.fakes import cell_state

NO_HTTP_URL = "http://127.0.0.1:1"  # the rep URL every cell's presence names: nothing listens there


@dataclass
class NatsFakeCell:
    state: CellState
    rep_id: str
    work_mode: str = "ok"  # ok | reject


@dataclass
class NatsFakeRep:
    state_mode: str = "ok"  # ok | garbage | invalid | silent | forge
    work_mode: str = "ok"  # ok | garbage


@dataclass
class NatsFakeReps:
    nc: Client
    cells: dict[str, NatsFakeCell] = field(default_factory=dict)
    reps: dict[str, NatsFakeRep] = field(default_factory=dict)
    state_requests: int = 0  # one per process asked
    state_replies: Counter = field(default_factory=Counter)  # rep_id -> replies sent
    work: dict[str, list[HostWork]] = field(default_factory=dict)  # rep_id -> the work it was sent

    async def add(self, cell_id: str, zone: str = "z1", *, rep: str | None = None, **fields) -> NatsFakeCell:
        """A cell of the process `rep` (default: a process of its own, named as the cell); `state_mode`
        and a `work_mode` other than "reject" are how its process answers."""
        rep_id = rep or cell_id
        if rep_id not in self.reps:
            self.reps[rep_id] = NatsFakeRep()
            await self.nc.subscribe(rep_subject(rep_id, "work"), cb=self._work_handler(rep_id))
            await self.nc.subscribe(cells_state_subject(rep_id), cb=self._state_handler(rep_id))
            await self.nc.flush()
        process = self.reps[rep_id]
        if "state_mode" in fields:
            process.state_mode = fields.pop("state_mode")
        if fields.get("work_mode") == "garbage":
            process.work_mode = fields.pop("work_mode")
        modes = {k: fields.pop(k) for k in ("work_mode",) if k in fields}
        cell = NatsFakeCell(cell_state(cell_id, zone, **fields), rep_id, **modes)
        self.cells[cell_id] = cell
        return cell

    def presences(self) -> list[CellPresence]:
        return [
            CellPresence.model_validate({**c.state.model_dump(), "rep_id": c.rep_id, "rep_url": NO_HTTP_URL})
            for c in self.cells.values()
        ]

    @property
    def lrps_received(self) -> int:
        return sum(len(w.instances(c)) for works in self.work.values() for w in works for c in w.cells)

    def _state_handler(self, rep_id: str):
        async def handle(msg: Msg) -> None:
            self.state_requests += 1
            rep = self.reps[rep_id]
            if rep.state_mode == "silent":
                return
            forge = rep.state_mode == "forge"
            speaks_for = [c.state for c in self.cells.values() if c.rep_id == rep_id or forge]
            body = {
                "ok": HostCellStates(cells=speaks_for).model_dump_json().encode(),
                "forge": HostCellStates(cells=speaks_for).model_dump_json().encode(),
                "garbage": b"\x00not json{",
                "invalid": b'{"cells": [{"cell_id": "half"}]}',
            }[rep.state_mode]
            self.state_replies[rep_id] += 1
            await self.nc.publish(msg.reply, body)

        return handle

    def _work_handler(self, rep_id: str):
        async def handle(msg: Msg) -> None:
            work = HostWork.model_validate_json(msg.data)
            self.work.setdefault(rep_id, []).append(work)
            if self.reps[rep_id].work_mode == "garbage":
                await msg.respond(b"<html>")
                return
            results = {}
            for cell_id, part in work.cells.items():
                if self.cells[cell_id].work_mode == "reject":
                    lrps = [LRPWork(desired=d, index=i) for d, i in work.instances(cell_id)]
                    results[cell_id] = WorkResult(
                        rejected_lrps=lrps, rejected_tasks=part.tasks, reason="full"
                    )
                else:
                    results[cell_id] = WorkResult()
            await msg.respond(HostWorkResult(cells=results).model_dump_json().encode())

        return handle


@contextlib.asynccontextmanager
async def nats_fake_reps(url: str) -> AsyncIterator[NatsFakeReps]:
    nc = await nats.connect(url, max_reconnect_attempts=1)
    reps = NatsFakeReps(nc)
    try:
        yield reps
    finally:
        await nc.close()
