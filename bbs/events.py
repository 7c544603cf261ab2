"""The in-process event broadcaster behind GET /v1/events (server-sent events).

Every committed change is published as one or more events; sinks (the NATS event publisher) get every
published list as it is; each SSE subscriber has a bounded queue of
ready-to-send SSE text chunks (one chunk per publish call, however many events it holds). A
subscriber that falls too far behind is disconnected rather than slowing the BBS down: it reconnects
and re-lists, as a Diego event consumer would.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from .records import iso
from .redact import masked_env

HEARTBEAT_S = 15.0
QUEUE_CHUNKS = 1000
_CLOSED = ""  # sentinel chunk: the stream ends


def event(kind: str, data: dict[str, Any], at: float | None = None) -> dict[str, Any]:
    """One Event (common.models.Event) as plain data. Every event is built here, so this is where env
    values are masked: no SSE or NATS subscriber, admin or not, ever gets them (bbs/redact.py)."""
    return {"type": kind, "data": masked_env(data), "at": iso(time.time() if at is None else at)}


def sse_chunk(events: Iterable[dict[str, Any]]) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n" for e in events)


class EventHub:
    def __init__(self, heartbeat_s: float = HEARTBEAT_S, queue_chunks: int = QUEUE_CHUNKS) -> None:
        self.heartbeat_s = heartbeat_s
        self.queue_chunks = queue_chunks
        self._subscribers: set[asyncio.Queue[str]] = set()
        self._sinks: list[Callable[[list[dict[str, Any]]], None]] = []
        self._closed = False

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    @property
    def listening(self) -> bool:
        """Whether anyone wants events (if not, the BBS does not even build them)."""
        return bool(self._subscribers or self._sinks)

    def add_sink(self, sink: Callable[[list[dict[str, Any]]], None]) -> None:
        """Call `sink(events)` on every publish (synchronously: a sink only queues them)."""
        self._sinks.append(sink)

    def publish(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        for sink in self._sinks:
            sink(events)
        if not self._subscribers:
            return
        chunk = sse_chunk(events)
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(chunk)
            except asyncio.QueueFull:
                self._drop(queue)

    def _drop(self, queue: asyncio.Queue[str]) -> None:
        self._subscribers.discard(queue)
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(_CLOSED)

    def close(self) -> None:
        """End every stream (shutdown): open SSE responses must not hold the server up."""
        self._closed = True
        for queue in list(self._subscribers):
            self._drop(queue)

    def full(self, max_subscribers: int) -> bool:
        """Whether another subscriber would be one too many (the API answers 429 then)."""
        return len(self._subscribers) >= max_subscribers

    async def stream(self, max_subscribers: int | None = None) -> AsyncIterator[str]:
        """SSE text for one subscriber: events as they come, a comment line every heartbeat_s. A stream
        that begins when `max_subscribers` already follow ends at once (the API checks `full` first: this
        holds the bound for requests that raced past that check)."""
        queue: asyncio.Queue[str] = asyncio.Queue(self.queue_chunks)
        if self._closed:
            return
        if max_subscribers is not None and self.full(max_subscribers):
            yield ": too many subscribers\n\n"
            return
        self._subscribers.add(queue)
        try:
            yield ": connected\n\n"  # lets the client see the subscription is live
            while True:
                try:
                    chunk = await asyncio.wait_for(queue.get(), timeout=self.heartbeat_s)
                except TimeoutError:
                    yield ": heartbeat\n\n"
                    continue
                if chunk == _CLOSED:
                    return
                yield chunk
        finally:
            self._subscribers.discard(queue)
