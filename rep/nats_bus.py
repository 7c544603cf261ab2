"""The rep's NATS side: the one rep API (rep/api.py) over NATS, with the same bodies.

- `vendue.cells.state.<rep_id>`: the process replies once with HostCellStates, the bid of every live cell
  (as GET /state?lrps=counts). Only this rep may subscribe to it, which is how the auctioneer knows whose
  reply it is.
- `vendue.rep.<rep_id>.*`: one subscription for the process, the verb in the last token: `work`
  (HostWork -> HostWorkResult), `stop` (StopInstances -> Found), `cancel` (CancelTasks -> Found), `cordon`
  (CordonCells -> Found).

Handlers are the same RepHost methods the HTTP routes call, and work passes the same fencing check
(rep/fencing.py): under a stale or unknown token the reply rejects all of it, with the reason. Who may
publish to these subjects is NATS's to enforce (each role's permissions, docs/security.md). Heartbeats and
lifecycle reports stay HTTP (the BBS REST API: PUT /v1/cells, POST /v1/lifecycle).
"""

from __future__ import annotations

import json
import logging

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from common.models import CancelTasks, CordonCells, HostWork, HostWorkResult, StopInstances
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import cells_state_subject, rep_wildcard

from .fencing import Fencing, Refused
from .host import RepHost

log = logging.getLogger("rep.nats")


class RepNatsBus:
    def __init__(self, host: RepHost, nats: NatsConnection, fencing: Fencing) -> None:
        self.host = host
        self.nats = nats
        self.fencing = fencing
        self._subscriptions: list[Subscription] = []
        self.state_requests = 0
        self.bad_requests = 0
        self.subscribed = False

    @property
    def ready(self) -> bool:
        """Connected and subscribed: what /readyz reports in NATS mode."""
        return self.subscribed and self.nats.connected

    async def subscribe(self, nc: Client) -> None:
        """Called once connected (nats-py restores these subscriptions after every reconnect)."""
        # The work subject first: a process that answers the state request must already be able to take work.
        # Two subscriptions that never match the same subject: nats-server allows one reply per delivery of
        # a request to this user (nats_server.ONE_REPLY), and a second match would use it up.
        self._subscriptions.append(await nc.subscribe(rep_wildcard(self.host.rep_id), cb=self._on_request))
        self._subscriptions.append(await nc.subscribe(cells_state_subject(self.host.rep_id),
                                                      cb=self._on_state_request))
        await nc.flush()
        self.subscribed = True
        serving = {"rep_id": self.host.rep_id, "cells": len(self.host.cells)}
        log.info("serving cells over NATS", extra={"data": serving})

    # --- handlers -------------------------------------------------------------------------------------

    async def _on_state_request(self, msg: Msg) -> None:
        if not msg.reply:
            return
        self.state_requests += 1
        try:
            await msg.respond(self.host.states().model_dump_json().encode())
        except Exception:  # disconnected: the auctioneer's deadline drops the cells that did not answer
            log.debug("state reply not published", exc_info=True)

    async def _on_request(self, msg: Msg) -> None:
        verb = msg.subject.rsplit(".", 1)[-1]
        try:
            if verb == "work":
                body = (await self._work(HostWork.model_validate_json(msg.data))).model_dump_json().encode()
            elif verb == "stop":
                body = self.host.stop(StopInstances.model_validate_json(msg.data)).model_dump_json().encode()
            elif verb == "cancel":
                body = self.host.cancel(CancelTasks.model_validate_json(msg.data)).model_dump_json().encode()
            elif verb == "cordon":
                body = self.host.cordon(CordonCells.model_validate_json(msg.data)).model_dump_json().encode()
            else:
                body = json.dumps({"error": f"unknown verb {verb!r}"}).encode()
        except ValidationError as exc:
            self.bad_requests += 1
            log.warning("unreadable request",
                        extra={"data": {"subject": msg.subject, "errors": exc.error_count()}})
            body = json.dumps({"error": f"invalid body: {exc.error_count()} errors"}).encode()
        if msg.reply:
            try:
                await msg.respond(body)
            except Exception:
                log.debug("reply not sent", exc_info=True)

    async def _work(self, work: HostWork) -> HostWorkResult:
        try:
            await self.fencing.admit(work.fencing_token)
        except Refused as refused:
            return self.host.refuse(work, refused.reason)
        return self.host.take(work)
