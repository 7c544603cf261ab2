"""The in-process event broadcaster behind GET /v1/events (server-sent events).

Every committed change is published as one or more events; sinks (the NATS event publisher) get every
published list as it is. Each event gets an id, `<epoch>-<seq>`: `epoch` is this hub's (this BBS
process's) own, new at every start, and `seq` counts its events. A publish call is one `Batch`; each SSE
subscriber has a bounded queue of batches, and an unfiltered subscriber sends a batch's SSE text, built
once for all of them (publish stays one append per subscriber whatever the number of events: the e2e
benchmark publishes 10,000+ events a second). A filtered subscriber (`EventFilter`: app, cell, types)
picks its events out of each batch in its own stream, not in publish.

The last REPLAY_EVENTS events are kept: a client reconnecting with `Last-Event-ID` gets what it missed,
then the live stream. An id this hub cannot resume from (older than what it kept, from another replica
or from before a restart, or events were not even built meanwhile: nobody listened) gets one `resync`
event instead — list again, then follow — with the id of the newest event, so that the next reconnect
resumes from there.

A subscriber that falls too far behind is disconnected rather than slowing the BBS down: it reconnects
(resuming, or told to resync), as a Diego event consumer would.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .records import iso
from .redact import masked_env

HEARTBEAT_S = 15.0
QUEUE_CHUNKS = 1000
REPLAY_EVENTS = (
    10_000  # kept for Last-Event-ID: a few seconds of a 10,000-instance push, minutes of a quiet one
)
# Events are built for this long after the last subscriber left (none would otherwise be, bbs/service.py),
# so that a client reconnecting within it resumes instead of resyncing.
LINGER_S = 60.0
RESYNC = "resync"


def event(kind: str, data: dict[str, Any], at: float | None = None) -> dict[str, Any]:
    """One Event (common.models.Event) as plain data. Every event is built here, so this is where env
    values are masked: no SSE or NATS subscriber, admin or not, ever gets them (bbs/redact.py)."""
    return {"type": kind, "data": masked_env(data), "at": iso(time.time() if at is None else at)}


def sse_chunk(events: Iterable[dict[str, Any]]) -> str:
    return "".join(f"id: {e['id']}\nevent: {e['type']}\ndata: {json.dumps(e, separators=(',', ':'))}\n\n"
                   for e in events)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """What one subscriber asked for (GET /v1/events?app=&cell=&type=...): all of it must match; several
    types are alternatives. The empty filter matches everything (and costs nothing)."""

    app: str | None = None  # the data's process_guid
    cell: str | None = None  # the data's cell_id
    types: frozenset[str] = frozenset()

    @property
    def everything(self) -> bool:
        return self.app is None and self.cell is None and not self.types

    def matches(self, e: dict[str, Any]) -> bool:
        if self.types and e["type"] not in self.types:
            return False
        data = e["data"]
        if self.app is not None and data.get("process_guid") != self.app:
            return False
        return self.cell is None or data.get("cell_id") == self.cell


@dataclass(slots=True)
class Batch:
    """The events of one publish call, numbered from `first`; its SSE text is built once, when first asked."""

    first: int
    events: list[dict[str, Any]]
    _chunk: str | None = field(default=None, repr=False)

    @property
    def last(self) -> int:
        return self.first + len(self.events) - 1

    @property
    def chunk(self) -> str:
        if self._chunk is None:
            self._chunk = sse_chunk(self.events)
        return self._chunk

    def after(self, seq: int, wanted: EventFilter) -> str:
        """The SSE text of this batch's events numbered after `seq` that `wanted` matches."""
        if seq < self.first and wanted.everything:
            return self.chunk
        return sse_chunk(e for e in self.events[max(0, seq + 1 - self.first):] if wanted.matches(e))


_CLOSED = Batch(-1, [])  # sentinel: the stream ends


class EventHub:
    def __init__(self, heartbeat_s: float = HEARTBEAT_S, queue_chunks: int = QUEUE_CHUNKS,
                 replay_events: int = REPLAY_EVENTS, linger_s: float = LINGER_S) -> None:
        self.heartbeat_s = heartbeat_s
        self.queue_chunks = queue_chunks
        self.replay_events = replay_events
        self.linger_s = linger_s
        # This process's events are told apart from another replica's, or a previous run's, by this.
        self.epoch = f"{int(time.time()):x}{secrets.token_hex(3)}"
        self._seq = 0  # the last number given to an event (or skipped: `missed`)
        self._kept: deque[Batch] = deque()  # the replay buffer, oldest first
        self._kept_events = 0
        self._subscribers: set[asyncio.Queue[Batch]] = set()
        self._sinks: list[Callable[[list[dict[str, Any]]], None]] = []
        self._closed = False
        self._linger_until = 0.0

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    @property
    def listening(self) -> bool:
        """Whether anyone wants events (if not, the BBS does not even build them, and calls `missed`):
        a subscriber, a sink, or one that left less than linger_s ago and may come back to resume."""
        return bool(self._subscribers or self._sinks) or time.monotonic() < self._linger_until

    @property
    def last_id(self) -> str:
        return f"{self.epoch}-{self._seq}"

    def add_sink(self, sink: Callable[[list[dict[str, Any]]], None]) -> None:
        """Call `sink(events)` on every publish (synchronously: a sink only queues them)."""
        self._sinks.append(sink)

    def publish(self, events: list[dict[str, Any]]) -> None:
        if not events:
            return
        batch = Batch(self._seq + 1, events)
        for seq, e in enumerate(events, batch.first):
            e["id"] = f"{self.epoch}-{seq}"
        self._seq = batch.last
        self._keep(batch)
        for sink in self._sinks:
            sink(events)
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(batch)
            except asyncio.QueueFull:
                self._drop(queue)

    def missed(self) -> None:
        """Changes were committed whose events were not built (nobody listened): nothing kept can be
        resumed from any more, so every Last-Event-ID before now gets a resync."""
        self._kept.clear()
        self._kept_events = 0
        self._seq += 1  # the skipped events' place: an id from before it is not the newest any more

    def _keep(self, batch: Batch) -> None:
        self._kept.append(batch)
        self._kept_events += len(batch.events)
        while self._kept_events - len(self._kept[0].events) >= self.replay_events:
            self._kept_events -= len(self._kept.popleft().events)

    def _resumable_from(self) -> int:
        """The oldest seq a client may have last seen and still get everything after it."""
        return self._kept[0].first - 1 if self._kept else self._seq

    def _resume_point(self, last_event_id: str | None) -> int | None:
        """The seq after which a client that last saw `last_event_id` resumes; None: it must resync."""
        epoch, _, seq = (last_event_id or "").strip().rpartition("-")
        if epoch != self.epoch or not seq.isdigit():
            return None
        number = int(seq)
        return number if self._resumable_from() <= number <= self._seq else None

    def _drop(self, queue: asyncio.Queue[Batch]) -> None:
        self._unsubscribe(queue)
        while not queue.empty():
            queue.get_nowait()
        queue.put_nowait(_CLOSED)

    def _unsubscribe(self, queue: asyncio.Queue[Batch]) -> None:
        if queue in self._subscribers:
            self._subscribers.discard(queue)
            if not self._subscribers:
                self._linger_until = time.monotonic() + self.linger_s

    def close(self) -> None:
        """End every stream (shutdown): open SSE responses must not hold the server up."""
        self._closed = True
        for queue in list(self._subscribers):
            self._drop(queue)

    def full(self, max_subscribers: int) -> bool:
        """Whether another subscriber would be one too many (the API answers 429 then)."""
        return len(self._subscribers) >= max_subscribers

    def _resync(self, last_event_id: str) -> str:
        reason = ("from another BBS replica or an earlier run of this one"
                  if last_event_id.rpartition("-")[0] != self.epoch else "older than the events kept")
        resync = event(RESYNC, {"last_event_id": last_event_id[:100], "reason": reason})
        resync["id"] = self.last_id
        return sse_chunk([resync])

    async def stream(self, max_subscribers: int | None = None, wanted: EventFilter = EventFilter(),
                     last_event_id: str | None = None) -> AsyncIterator[str]:
        """SSE text for one subscriber: what it missed since `last_event_id` (or a resync), then events as
        they come, a comment line every heartbeat_s. A stream that begins when `max_subscribers` already
        follow ends at once (the API checks `full` first: this holds the bound for requests that raced
        past that check)."""
        queue: asyncio.Queue[Batch] = asyncio.Queue(self.queue_chunks)
        if self._closed:
            return
        if max_subscribers is not None and self.full(max_subscribers):
            yield ": too many subscribers\n\n"
            return
        # Subscribed and the replay taken in one step (no await between): every event is in exactly one.
        self._subscribers.add(queue)
        missed: list[str] = []
        if last_event_id is not None:
            after = self._resume_point(last_event_id)
            if after is None:
                missed.append(self._resync(last_event_id))
            else:
                missed.extend(b.after(after, wanted) for b in self._kept if b.last > after)
        try:
            yield ": connected\n\n"  # lets the client see the subscription is live
            for chunk in missed:
                if chunk:
                    yield chunk
            while True:
                try:
                    batch = await asyncio.wait_for(queue.get(), timeout=self.heartbeat_s)
                except TimeoutError:
                    yield ": heartbeat\n\n"
                    continue
                if batch is _CLOSED:
                    return
                text = batch.chunk if wanted.everything else batch.after(batch.first - 1, wanted)
                if text:
                    yield text
        finally:
            self._unsubscribe(queue)
