"""Sending the auction's work over NATS: one request/reply on `vendue.rep.<rep_id>.work` per rep process.

The body is the same HostWork JSON as the HTTP POST, the reply the same HostWorkResult (dispatch.py
groups, chunks and reads them for both transports). A body bigger than the server's max_payload is split
into parts (each its own request) rather than refused. No reply (no rep subscribed, a timeout, NATS down)
rejects the whole part as undelivered, to be carried into the next batch; a reply that is not a
HostWorkResult is logged and counted and the work counted as taken (the rep answered, so it got the
work: sending it again could place it twice).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from common.transport.nats_connection import NatsConnection
from common.transport.subjects import rep_subject

from .cells import RepAddress
from .dispatch import BodyWriter, CellWork, ConcurrentWorkSender, Rejection, undelivered
from .metrics import Metrics

log = logging.getLogger("auctioneer.nats_dispatch")

# Room left in a message for the protocol's own bytes (subject, reply inbox, headers).
PAYLOAD_MARGIN = 4096


class NatsWorkSender(ConcurrentWorkSender):
    """Work over NATS: one request/reply on vendue.rep.<rep_id>.work per rep process (or per part)."""

    def __init__(self, nats: NatsConnection, metrics: Metrics, **options: Any) -> None:
        super().__init__(metrics, **options)
        self._nats = nats

    async def _send_rep(
        self, rep: RepAddress, works: list[CellWork], writer: BodyWriter, limit: asyncio.Semaphore
    ) -> list[list[Rejection]]:
        if not self._nats.connected and not await self._nats.until_connected(self._timeout):
            return undelivered(rep, works, "work not delivered: NATS not connected")
        parts = split_to_fit(works, writer, self._nats.client.max_payload - PAYLOAD_MARGIN)
        answers = await asyncio.gather(*(self._request(rep, part, body, limit) for part, body in parts))
        # A cell's work split over parts: its rejections from each, gathered back onto the work sent.
        by_cell: dict[str, list[Rejection]] = {}
        for (part, _), answer in zip(parts, answers, strict=True):
            for work, rejected in zip(part, answer, strict=True):
                by_cell.setdefault(work.cell_id, []).extend(rejected)
        return [by_cell.get(w.cell_id, []) for w in works]

    async def _request(
        self, rep: RepAddress, works: list[CellWork], body: bytes, limit: asyncio.Semaphore
    ) -> list[list[Rejection]]:
        try:
            async with limit:
                self._metrics.message("work_request")
                subject = rep_subject(rep.rep_id, "work")
                reply = await self._nats.client.request(subject, body, timeout=self._timeout)
        except Exception as exc:  # no responders, timeout, disconnected: the work did not (surely) arrive
            return undelivered(rep, works, f"work not delivered: {type(exc).__name__}")
        self._metrics.message("work_reply")
        return self._rejections_in(rep, works, reply.data)


def split_to_fit(
    works: list[CellWork], writer: BodyWriter, max_bytes: int
) -> list[tuple[list[CellWork], bytes]]:
    """The works as one body, or halves (recursively) when it is larger than `max_bytes`: first the list
    of cells, then a single cell's work (its parts then travel in separate requests)."""
    body = writer.body(works)
    if len(body) <= max_bytes:
        return [(works, body)]
    if len(works) > 1:
        half = len(works) // 2
        return split_to_fit(works[:half], writer, max_bytes) + split_to_fit(works[half:], writer, max_bytes)
    work = works[0]
    if len(work) <= 1:
        return [(works, body)]  # one item too big for NATS: sent as is, the server refuses it (undelivered)
    half = len(work) // 2
    lrps, tasks = work.lrps, work.tasks
    first = CellWork(work.cell_id, work.rep, lrps[:half], tasks[: max(0, half - len(lrps))])
    second = CellWork(work.cell_id, work.rep, lrps[half:], tasks[max(0, half - len(lrps)):])
    return split_to_fit([first], writer, max_bytes) + split_to_fit([second], writer, max_bytes)
