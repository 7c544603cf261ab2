"""Test doubles of reps on NATS: cells that answer the state scatter-gather and take work, recording both.

A cell can answer normally, with garbage ("garbage": not JSON), with JSON that is not a CellState
("invalid"), or not at all ("silent"), to exercise the auctioneer's handling of each.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from common.models import CellPresence, CellState, Work, WorkResult
from common.transport.subjects import CELL_ID_HEADER, CELLS_STATE, cell_subject
from tests.auctioneer.fakes import cell_state


@dataclass
class NatsFakeCell:
    state: CellState
    state_mode: str = "ok"  # ok | garbage | invalid | silent
    work_mode: str = "ok"  # ok | reject | garbage


@dataclass
class NatsFakeReps:
    nc: Client
    cells: dict[str, NatsFakeCell] = field(default_factory=dict)
    state_requests: int = 0
    state_replies: Counter = field(default_factory=Counter)
    work: dict[str, list[Work]] = field(default_factory=dict)

    async def add(self, cell_id: str, zone: str = "z1", **fields) -> NatsFakeCell:
        modes = {k: fields.pop(k) for k in ("state_mode", "work_mode") if k in fields}
        cell = NatsFakeCell(cell_state(cell_id, f"http://127.0.0.1:1/cells/{cell_id}", zone, **fields), **modes)
        self.cells[cell_id] = cell
        await self.nc.subscribe(cell_subject(cell_id, "work"), cb=self._work_handler(cell))
        await self.nc.flush()
        return cell

    def presences(self) -> list[CellPresence]:
        return [CellPresence.model_validate(c.state.model_dump()) for c in self.cells.values()]

    @property
    def lrps_received(self) -> int:
        return sum(len(w.all_lrps()) for works in self.work.values() for w in works)

    async def on_state(self, msg: Msg) -> None:
        self.state_requests += 1
        for cell_id, cell in self.cells.items():
            if cell.state_mode == "silent":
                continue
            body = {
                "ok": cell.state.model_dump_json().encode(),
                "garbage": b"\x00not json{",
                "invalid": b'{"cell_id": "%s"}' % cell_id.encode(),
            }[cell.state_mode]
            self.state_replies[cell_id] += 1
            await self.nc.publish(msg.reply, body, headers={CELL_ID_HEADER: cell_id})

    def _work_handler(self, cell: NatsFakeCell):
        async def handle(msg: Msg) -> None:
            work = Work.model_validate_json(msg.data)
            self.work.setdefault(cell.state.cell_id, []).append(work)
            if cell.work_mode == "garbage":
                await msg.respond(b"<html>")
            elif cell.work_mode == "reject":
                result = WorkResult(rejected_lrps=work.all_lrps(), rejected_tasks=work.tasks, reason="full")
                await msg.respond(result.model_dump_json().encode())
            else:
                await msg.respond(WorkResult().model_dump_json().encode())

        return handle


@contextlib.asynccontextmanager
async def nats_fake_reps(url: str) -> AsyncIterator[NatsFakeReps]:
    nc = await nats.connect(url, max_reconnect_attempts=1)
    reps = NatsFakeReps(nc)
    await nc.subscribe(CELLS_STATE, cb=reps.on_state)
    await nc.flush()
    try:
        yield reps
    finally:
        await nc.close()
