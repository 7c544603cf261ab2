"""Auction requests over NATS: `vendue.auctioneer.lrps` / `.tasks` into the same batcher as the HTTP POSTs.

The subscriptions are in a queue group, so with several auctioneers each request is taken by exactly one.
`open()` / `close()` subscribe and unsubscribe: an auctioneer that is not the active one (the lease) keeps
them closed and takes nothing. A request with a reply inbox is answered {"accepted": n}, like the 202; a
body that is not a list of start requests is logged, counted and answered with an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import TypeAdapter, ValidationError

from common.models import LRPStartRequest, TaskStartRequest
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import AUCTIONEER_LRPS, AUCTIONEER_QUEUE, AUCTIONEER_TASKS

from .metrics import Metrics

log = logging.getLogger("auctioneer.nats_intake")

_LRP_REQUESTS = TypeAdapter(list[LRPStartRequest])
_TASK_REQUESTS = TypeAdapter(list[TaskStartRequest])


class NatsAuctionIntake:
    def __init__(
        self,
        nats: NatsConnection,
        add_lrps: Callable[[Iterable[LRPStartRequest]], int],
        add_tasks: Callable[[Iterable[TaskStartRequest]], int],
        metrics: Metrics,
    ) -> None:
        self._nats = nats
        self._add_lrps = add_lrps
        self._add_tasks = add_tasks
        self._metrics = metrics
        self._subscriptions: list[Subscription] = []
        self.received = 0

    @property
    def is_open(self) -> bool:
        return bool(self._subscriptions)

    async def open(self) -> None:
        if self._subscriptions:
            return
        nc = self._nats.client
        self._subscriptions = [
            await nc.subscribe(AUCTIONEER_LRPS, queue=AUCTIONEER_QUEUE, cb=self._on_lrps),
            await nc.subscribe(AUCTIONEER_TASKS, queue=AUCTIONEER_QUEUE, cb=self._on_tasks),
        ]
        log.info("taking auction requests over NATS", extra={"data": {
            "subjects": [AUCTIONEER_LRPS, AUCTIONEER_TASKS], "queue": AUCTIONEER_QUEUE,
        }})

    async def close(self) -> None:
        subscriptions, self._subscriptions = self._subscriptions, []
        for sub in subscriptions:
            try:
                await sub.unsubscribe()
            except Exception:  # disconnected: the server drops our interest with the connection
                log.debug("intake unsubscribe failed", exc_info=True)

    async def _on_lrps(self, msg: Msg) -> None:
        try:
            requests = _LRP_REQUESTS.validate_json(msg.data)
        except ValidationError as exc:
            await self._refuse(msg, "lrps", exc)
            return
        await self._accept(msg, self._add_lrps(requests), len(requests))

    async def _on_tasks(self, msg: Msg) -> None:
        try:
            requests = _TASK_REQUESTS.validate_json(msg.data)
        except ValidationError as exc:
            await self._refuse(msg, "tasks", exc)
            return
        await self._accept(msg, self._add_tasks(requests), len(requests))

    async def _accept(self, msg: Msg, items: int, requests: int) -> None:
        self.received += requests
        if msg.reply:
            await self._answer(msg, {"accepted": requests})

    async def _refuse(self, msg: Msg, kind: str, exc: ValidationError) -> None:
        self._metrics.bad_reply(f"intake_{kind}")
        log.warning("unreadable auction request", extra={"data": {
            # Not the body: a start request carries the app's env (its secrets).
            "subject": msg.subject, "errors": exc.error_count(), "bytes": len(msg.data),
        }})
        if msg.reply:
            await self._answer(msg, {"error": f"invalid {kind} request: {exc.error_count()} errors"})

    async def _answer(self, msg: Msg, body: dict) -> None:
        try:
            await msg.respond(json.dumps(body).encode())
        except Exception:  # the requester gave up or we are disconnected: the work is queued anyway
            log.debug("intake reply failed", exc_info=True)
