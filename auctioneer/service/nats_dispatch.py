"""Sending the auction's work over NATS: one request/reply on `vendue.cell.<id>.work` per winning cell.

The body is the same Work JSON as the HTTP POST, the reply the same WorkResult. A Work bigger than the
server's max_payload is split into parts (each its own request) rather than refused. No reply (no rep
subscribed, a timeout, NATS down) rejects the whole part as undelivered, to be carried into the next
batch; a reply that is not a WorkResult is logged and counted and the work counted as taken (the rep
answered, so it got the work: sending it again could place it twice).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from common.models import WorkResult
from common.transport.nats_connection import NatsConnection
from common.transport.subjects import cell_subject

from .dispatch import (
    BodyWriter,
    CellWork,
    ConcurrentWorkSender,
    Rejection,
    rejections_from,
    undelivered,
)
from .metrics import Metrics

log = logging.getLogger("auctioneer.nats_dispatch")

# Room left in a message for the protocol's own bytes (subject, reply inbox, headers).
PAYLOAD_MARGIN = 4096


class NatsWorkSender(ConcurrentWorkSender):
    """Work over NATS: one request/reply on vendue.cell.<id>.work per winning cell (or per part)."""

    def __init__(self, nats: NatsConnection, metrics: Metrics, **options: Any) -> None:
        super().__init__(metrics, **options)
        self._nats = nats

    async def _send_one(self, work: CellWork, writer: BodyWriter, limit: asyncio.Semaphore) -> list[Rejection]:
        if not self._nats.connected and not await self._nats.until_connected(self._timeout):
            return undelivered(work, "work not delivered: NATS not connected")
        parts = split_to_fit(work, writer, self._nats.client.max_payload - PAYLOAD_MARGIN)
        results = await asyncio.gather(*(self._request(work.cell_id, body, part, limit) for part, body in parts))
        return [r for part_rejections in results for r in part_rejections]

    async def _request(
        self, cell_id: str, body: bytes, part: CellWork, limit: asyncio.Semaphore
    ) -> list[Rejection]:
        try:
            async with limit:
                self._metrics.message("work_request")
                reply = await self._nats.client.request(cell_subject(cell_id, "work"), body, timeout=self._timeout)
        except Exception as exc:  # no responders, timeout, disconnected: the work did not (surely) arrive
            return undelivered(part, f"work not delivered: {type(exc).__name__}")
        self._metrics.message("work_reply")
        try:
            result = WorkResult.model_validate_json(reply.data)
        except ValidationError as exc:
            self._metrics.bad_reply("work")
            log.warning("unreadable work result", extra={"data": {
                "cell_id": cell_id, "errors": exc.error_count(), "head": reply.data[:80],
            }})
            return []
        return rejections_from(part, result)


def split_to_fit(work: CellWork, writer: BodyWriter, max_bytes: int) -> list[tuple[CellWork, bytes]]:
    """The work as one body, or halves (recursively) when it is larger than `max_bytes`."""
    body = writer.body(work)
    if len(body) <= max_bytes or len(work) <= 1:
        return [(work, body)]
    items_lrps, items_tasks = work.lrps, work.tasks
    half = len(work) // 2
    first = CellWork(work.cell_id, work.rep_url, items_lrps[:half], items_tasks[: max(0, half - len(items_lrps))])
    second = CellWork(work.cell_id, work.rep_url, items_lrps[half:], items_tasks[max(0, half - len(items_lrps)):])
    return split_to_fit(first, writer, max_bytes) + split_to_fit(second, writer, max_bytes)
