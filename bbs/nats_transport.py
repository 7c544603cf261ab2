"""The BBS on NATS (`--transport nats`): what it sends and hears there instead of (or besides) HTTP.

- NatsOutbound: auction requests as requests on `vendue.auctioneer.lrps` / `.tasks` (the auctioneers'
  queue group answers {"accepted": n}); a rep process's stop and cancel batches (the same bodies as over
  HTTP) on `vendue.rep.<rep_id>.stop` / `.cancel`, falling back to the rep's HTTP API when no rep answers
  there (a rep running HTTP only). Completion callbacks and the evacuation check of a rep's /state stay
  HTTP (inherited).
- EventPublisher: every Event also on `vendue.events.<type>`, in commit order, from one pump task.

Presence stays HTTP (PUT /v1/cells every round): one surface fewer to secure.

Whatever fails is logged and left to convergence, as with HTTP: nothing desired is lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any

from common.retry import AUCTIONEER_SENDS_NATS, retrying
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import AUCTIONEER_LRPS, AUCTIONEER_TASKS, event_subject, rep_subject

from .events import EventHub
from .metrics import BBSMetrics
from .outbound import Outbound, RepKey, RepVerb

log = logging.getLogger("bbs.nats")

PAYLOAD_MARGIN = 4096  # room for subject, reply inbox and headers within max_payload
NATS_SEND_ATTEMPTS = 6  # at least, and for at least NATS_SEND_WINDOW_S (the jittered waits are shorter)
NATS_SEND_WINDOW_S = 2.5  # 0.1 + 0.2 + 0.4 + 0.8 + 1.0 s: the attempts' delays before jitter
EVENT_BACKLOG = 100_000  # events queued while NATS is away; the oldest go first past this


def json_chunks(items: list[dict[str, Any]], max_bytes: int) -> list[bytes]:
    """`items` as JSON arrays of at most `max_bytes` each (an item bigger than that goes alone)."""
    chunks: list[bytes] = []
    current: list[bytes] = []
    size = 2
    for item in items:
        encoded = json.dumps(item, separators=(",", ":")).encode()
        if current and size + len(encoded) + 1 > max_bytes:
            chunks.append(b"[" + b",".join(current) + b"]")
            current, size = [], 2
        current.append(encoded)
        size += len(encoded) + 1
    if current:
        chunks.append(b"[" + b",".join(current) + b"]")
    return chunks


class NatsOutbound(Outbound):
    def __init__(self, nats: NatsConnection, auctioneer_url: str, metrics: BBSMetrics, **kwargs: Any) -> None:
        super().__init__(auctioneer_url, metrics, **kwargs)
        self.nats = nats
        self._request_timeout = float(kwargs.get("timeout", 5.0))

    async def _post_auctioneer(self, path: str, body: list[dict[str, Any]], kind: str) -> None:
        subject = AUCTIONEER_LRPS if kind == "lrps" else AUCTIONEER_TASKS
        if not await self.nats.until_connected(self._request_timeout):
            self.metrics.auctioneer_requests.labels(kind=kind, outcome="error").inc()
            self.auction_lost()
            log.warning("auctioneer send failed: NATS not connected; convergence will retry",
                        extra={"data": {"subject": subject, "items": len(body)}})
            return
        for chunk in json_chunks(body, self.nats.client.max_payload - PAYLOAD_MARGIN):
            await self._request_auctioneer(subject, chunk, kind)

    async def _request_auctioneer(self, subject: str, chunk: bytes, kind: str) -> None:
        # Right after a NATS restart the BBS may reconnect before the auctioneer re-subscribed ("no
        # responders"): tries spread over a few seconds ride that out before leaving it to convergence.
        try:
            attempts = max(self.attempts, NATS_SEND_ATTEMPTS)
            async for attempt in retrying(AUCTIONEER_SENDS_NATS, attempts=attempts,
                                          at_least_s=NATS_SEND_WINDOW_S, on=Exception):
                with attempt:
                    try:
                        reply = await self.nats.client.request(subject, chunk, timeout=self._request_timeout)
                        answer = json.loads(reply.data)
                    except Exception:  # no responders (no auctioneer), timeout, disconnected, bad reply
                        self.metrics.auctioneer_requests.labels(kind=kind, outcome="error").inc()
                        raise
        except Exception as exc:
            self.auction_lost()
            log.warning("auctioneer send failed; convergence will retry", extra={"data": {
                "subject": subject, "bytes": len(chunk), "error": repr(exc),
            }})
            return
        if isinstance(answer, dict) and "error" in answer:  # refused: sending it again will not help
            self.metrics.auctioneer_requests.labels(kind=kind, outcome="error").inc()
            log.error("auctioneer refused the request", extra={"data": {"subject": subject, **answer}})
            return
        self.metrics.auctioneer_requests.labels(kind=kind, outcome="ok").inc()

    async def _rep_request(self, rep: RepKey, verb: RepVerb, body: bytes) -> bool:
        rep_url, rep_id = rep
        if rep_id and self.nats.connected:
            subject = rep_subject(rep_id, verb)
            async with self._rep_slots:
                try:
                    await self.nats.client.request(subject, body, timeout=self._request_timeout)
                    self.metrics.rep_requests.labels(kind=verb, outcome="ok").inc()
                    return True
                except Exception as exc:
                    log.info("rep did not answer on NATS; trying HTTP", extra={"data": {
                        "subject": subject, "error": repr(exc),
                    }})
        return await super()._rep_request(rep, verb, body)


class EventPublisher:
    """An EventHub sink: queues each published list and one task publishes them in order."""

    def __init__(self, nats: NatsConnection) -> None:
        self.nats = nats
        self._queue: deque[dict[str, Any]] = deque(maxlen=EVENT_BACKLOG)
        self._wake = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self.published = 0
        self.dropped = 0

    def attach(self, hub: EventHub) -> None:
        hub.add_sink(self.enqueue)
        self._pump = asyncio.create_task(self._run(), name="bbs-nats-events")

    def enqueue(self, events: list[dict[str, Any]]) -> None:
        overflow = len(self._queue) + len(events) - EVENT_BACKLOG
        if overflow > 0:
            self.dropped += overflow
        self._queue.extend(events)
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not await self.nats.until_connected(3600):
                continue
            nc = self.nats.client
            while self._queue:
                event = self._queue[0]
                try:
                    await nc.publish(
                        event_subject(str(event["type"])), json.dumps(event, separators=(",", ":")).encode()
                    )
                except Exception as exc:  # disconnected and the client's buffer is full: wait for reconnect
                    log.info(
                        "event publish paused",
                        extra={"data": {"error": repr(exc), "queued": len(self._queue)}},
                    )
                    await self.nats.until_connected(5.0)
                    self._wake.set()
                    break
                self._queue.popleft()
                self.published += 1

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
