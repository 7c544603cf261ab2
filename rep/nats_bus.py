"""The rep's NATS side: every hosted cell answers state, takes work, stops and cancels over NATS.

- `vendue.cells.state`: one subscription per process; each live hosted cell replies with its CellState
  (a sim host with 100 cells answers 100 messages from one subscription). Every reply carries the
  cell id in a header so the auctioneer can attribute it even if its body were unreadable.
- `vendue.cell.<id>.*`: one subscription per cell, the verb in the last token: `work` (Work ->
  WorkResult), `stop` (StopLRP -> Found), `cancel` (CancelTask -> Found).
- `vendue.cells.heartbeat`: the cells' CellPresence, published every heartbeat round (besides the HTTP
  PUT; the BBS counts a cell present if either arrived within the TTL).

Handlers are the same Cell methods the HTTP routes call. Lifecycle reports stay HTTP (the BBS REST API).
"""

from __future__ import annotations

import json
import logging

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from common.models import Work, WorkResult
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import (
    CELL_ID_HEADER,
    CELLS_HEARTBEAT,
    CELLS_STATE,
    CancelTask,
    Found,
    StopLRP,
    cell_wildcard,
)

from .cell import Cell
from .host import RepHost

log = logging.getLogger("rep.nats")


class RepNatsBus:
    def __init__(self, host: RepHost, nats: NatsConnection) -> None:
        self.host = host
        self.nats = nats
        self._subscriptions: list[Subscription] = []
        self.state_requests = 0
        self.bad_requests = 0
        self.subscribed = False

    @property
    def ready(self) -> bool:
        """Connected and subscribed: what /ping reports in NATS mode."""
        return self.subscribed and self.nats.connected

    async def subscribe(self, nc: Client) -> None:
        """Called once connected (nats-py restores these subscriptions after every reconnect)."""
        # Work subjects first: a cell that answers the state request must already be able to take work.
        for cell in self.host.cells.values():
            self._subscriptions.append(await nc.subscribe(cell_wildcard(cell.cell_id), cb=self._cell_handler(cell)))
        self._subscriptions.append(await nc.subscribe(CELLS_STATE, cb=self._on_state_request))
        await nc.flush()
        self.subscribed = True
        log.info("serving cells over NATS", extra={"data": {"cells": len(self.host.cells)}})

    async def publish_presence(self, cells: list[Cell]) -> int:
        """Publish each cell's presence on vendue.cells.heartbeat; returns how many went out."""
        if not self.nats.connected:
            return 0
        nc = self.nats.client
        sent = 0
        for cell in cells:
            try:
                await nc.publish(CELLS_HEARTBEAT, cell.presence().model_dump_json().encode())
                sent += 1
            except Exception:  # disconnected mid-round: the HTTP heartbeat still goes out
                log.debug("NATS heartbeat not published", exc_info=True)
                break
        return sent

    # --- handlers -------------------------------------------------------------------------------------

    async def _on_state_request(self, msg: Msg) -> None:
        if not msg.reply:
            return
        self.state_requests += 1
        nc = self.nats.client
        # All replies in one go, without yielding: under load, yielding between cells lets the rep's
        # other work (starts, reports, heartbeats) slip in between and stretch the whole gather.
        for cell in list(self.host.cells.values()):
            if cell.retired:
                continue
            try:
                await nc.publish(
                    msg.reply, cell.state(counts=True).model_dump_json().encode(), headers={CELL_ID_HEADER: cell.cell_id}
                )
            except Exception:  # disconnected: the auctioneer's deadline drops the cells that did not answer
                log.debug("state reply not published", exc_info=True)
                return

    def _cell_handler(self, cell: Cell):
        async def handle(msg: Msg) -> None:
            verb = msg.subject.rsplit(".", 1)[-1]
            try:
                if verb == "work":
                    body = self._work(cell, msg.data)
                elif verb == "stop":
                    body = self._stop(cell, StopLRP.model_validate_json(msg.data))
                elif verb == "cancel":
                    body = self._cancel(cell, CancelTask.model_validate_json(msg.data))
                else:
                    body = json.dumps({"error": f"unknown verb {verb!r}"}).encode()
            except ValidationError as exc:
                self.bad_requests += 1
                log.warning("unreadable request", extra={"data": {
                    "cell_id": cell.cell_id, "subject": msg.subject, "errors": exc.error_count(),
                }})
                body = json.dumps({"error": f"invalid body: {exc.error_count()} errors"}).encode()
            if msg.reply:
                try:
                    await msg.respond(body)
                except Exception:
                    log.debug("reply not sent", exc_info=True)

        return handle

    def _work(self, cell: Cell, data: bytes) -> bytes:
        work = Work.model_validate_json(data)
        if cell.retired:
            result = WorkResult(rejected_lrps=work.all_lrps(), rejected_tasks=work.tasks, reason="cell is evacuating")
        else:
            result = cell.accept(work)
        return result.model_dump_json().encode()

    def _stop(self, cell: Cell, request: StopLRP) -> bytes:
        found = not cell.retired and cell.has_instance(request.instance_guid)
        if found:
            cell.in_background(cell.stop_lrp(request.instance_guid))
        return Found(found=found).model_dump_json().encode()

    def _cancel(self, cell: Cell, request: CancelTask) -> bytes:
        found = not cell.retired and cell.has_task(request.task_guid)
        if found:
            cell.in_background(cell.cancel_task(request.task_guid))
        return Found(found=found).model_dump_json().encode()
