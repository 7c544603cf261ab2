"""The BBS on NATS (`--transport nats`): what it sends and hears there instead of (or besides) HTTP.

- NatsOutbound: auction requests as requests on `vendue.auctioneer.lrps` / `.tasks` (the auctioneers'
  queue group answers {"accepted": n}); stops and cancels on `vendue.cell.<id>.stop` / `.cancel`, falling
  back to the rep's HTTP API when no rep answers there (a rep running HTTP only). Completion callbacks and
  the evacuation check of a rep's /state stay HTTP (inherited).
- EventPublisher: every Event also on `vendue.events.<type>`, in commit order, from one pump task.
- PresenceListener: a CellPresence on `vendue.cells.heartbeat` is a presence PUT; a cell is present if
  either transport heartbeated it within the TTL.

Whatever fails is logged and left to convergence, as with HTTP: nothing desired is lost.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any
from urllib.parse import quote

from nats.aio.client import Client
from nats.aio.msg import Msg
from pydantic import ValidationError

from common.models import CellPresence
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import (
    AUCTIONEER_LRPS,
    AUCTIONEER_TASKS,
    CELLS_HEARTBEAT,
    CancelTask,
    StopLRP,
    cell_subject,
    event_subject,
)

from .events import EventHub
from .metrics import BBSMetrics
from .outbound import Outbound
from .service import BBS

log = logging.getLogger("bbs.nats")

PAYLOAD_MARGIN = 4096  # room for subject, reply inbox and headers within max_payload
NATS_SEND_ATTEMPTS = 6  # 0.1 + 0.2 + 0.4 + 0.8 + 1.0 s of backoff between them
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
            log.warning("auctioneer send failed: NATS not connected; convergence will retry",
                        extra={"data": {"subject": subject, "items": len(body)}})
            return
        for chunk in json_chunks(body, self.nats.client.max_payload - PAYLOAD_MARGIN):
            await self._request_auctioneer(subject, chunk, kind)

    async def _request_auctioneer(self, subject: str, chunk: bytes, kind: str) -> None:
        # Right after a NATS restart the BBS may reconnect before the auctioneer re-subscribed ("no
        # responders"): tries spread over a few seconds ride that out before leaving it to convergence.
        delay = 0.1
        attempts = max(self.attempts, NATS_SEND_ATTEMPTS)
        for attempt in range(1, attempts + 1):
            try:
                reply = await self.nats.client.request(subject, chunk, timeout=self._request_timeout)
                answer = json.loads(reply.data)
                if isinstance(answer, dict) and "error" in answer:  # refused: sending it again will not help
                    self.metrics.auctioneer_requests.labels(kind=kind, outcome="error").inc()
                    log.error("auctioneer refused the request", extra={"data": {"subject": subject, **answer}})
                    return
                self.metrics.auctioneer_requests.labels(kind=kind, outcome="ok").inc()
                return
            except Exception as exc:  # no responders (no auctioneer), timeout, disconnected, bad reply
                self.metrics.auctioneer_requests.labels(kind=kind, outcome="error").inc()
                if attempt == attempts:
                    log.warning("auctioneer send failed; convergence will retry", extra={"data": {
                        "subject": subject, "bytes": len(chunk), "error": repr(exc),
                    }})
                    return
            await asyncio.sleep(delay)  # back off between attempts
            delay = min(delay * 2, 1.0)

    def stop_instance(self, rep_url: str, process_guid: str, instance_guid: str, *, cell_id: str = "") -> None:
        if not cell_id:
            super().stop_instance(rep_url, process_guid, instance_guid)
            return
        path = f"/v1/lrps/{quote(process_guid, safe='')}/instances/{quote(instance_guid, safe='')}/stop"
        body = StopLRP(process_guid=process_guid, instance_guid=instance_guid).model_dump_json().encode()
        self._spawn(self._rep_request(cell_subject(cell_id, "stop"), body, "stop", rep_url.rstrip("/") + path))

    def cancel_task(self, rep_url: str, task_guid: str, *, cell_id: str = "") -> None:
        if not cell_id:
            super().cancel_task(rep_url, task_guid)
            return
        body = CancelTask(task_guid=task_guid).model_dump_json().encode()
        url = rep_url.rstrip("/") + f"/v1/tasks/{quote(task_guid, safe='')}/cancel"
        self._spawn(self._rep_request(cell_subject(cell_id, "cancel"), body, "cancel", url))

    async def _rep_request(self, subject: str, body: bytes, kind: str, http_url: str) -> bool:
        if self.nats.connected:
            async with self._rep_slots:
                try:
                    await self.nats.client.request(subject, body, timeout=self._request_timeout)
                    self.metrics.rep_requests.labels(kind=kind, outcome="ok").inc()
                    return True
                except Exception as exc:
                    log.info("rep did not answer on NATS; trying HTTP", extra={"data": {
                        "subject": subject, "error": repr(exc),
                    }})
        return await self._post(http_url, None, kind)


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
                    await nc.publish(event_subject(str(event["type"])), json.dumps(event, separators=(",", ":")).encode())
                except Exception as exc:  # disconnected and the client's buffer is full: wait for reconnect
                    log.info("event publish paused", extra={"data": {"error": repr(exc), "queued": len(self._queue)}})
                    await self.nats.until_connected(5.0)
                    self._wake.set()
                    break
                self._queue.popleft()
                self.published += 1

    async def close(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)


class PresenceListener:
    """Heartbeats from NATS, committed the same way as a PUT /v1/cells/<id> (grouped transactions)."""

    def __init__(self, bbs: BBS) -> None:
        self.bbs = bbs
        self.received = 0
        self.invalid = 0
        self._inflight: set[asyncio.Task[None]] = set()

    async def subscribe(self, nc: Client) -> None:
        await nc.subscribe(CELLS_HEARTBEAT, cb=self._on_heartbeat)

    async def _on_heartbeat(self, msg: Msg) -> None:
        try:
            presence = CellPresence.model_validate_json(msg.data)
        except ValidationError as exc:
            self.invalid += 1
            log.warning("unreadable heartbeat", extra={"data": {"errors": exc.error_count(), "head": msg.data[:80]}})
            return
        self.received += 1
        # Not awaited here: the subscription's callbacks run one at a time, and heartbeats arriving
        # together should share one transaction (the BBS's group commit), not queue for one each.
        task = asyncio.create_task(self._commit(presence))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _commit(self, presence: CellPresence) -> None:
        try:
            await self.bbs.heartbeat(presence.cell_id, presence)
        except Exception:
            log.exception("heartbeat from NATS not stored", extra={"data": {"cell_id": presence.cell_id}})

    async def close(self) -> None:
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)
