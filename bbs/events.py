"""The in-process event broadcaster behind GET /v1/events (server-sent events).

Every committed change is published as one or more events; sinks (the NATS event publisher) get every
published list as it is. Each event gets an id, `<epoch>-<seq>`: `epoch` is this hub's (this BBS
process's) own, new at every start, and `seq` counts its events. What is published within FLUSH_S is one
`Batch`; each SSE subscriber has a bounded queue of batches, and an unfiltered subscriber sends a batch's
SSE text, built once for all of them (a flush is one append per subscriber whatever the number of events:
the e2e benchmark publishes 10,000+ events a second in hundreds of publishes). A filtered subscriber
(`EventFilter`: app, cell, types) picks its events out of each batch in its own stream, not in publish.

The last REPLAY_EVENTS events are kept: a client reconnecting with `Last-Event-ID` gets what it missed,
then the live stream. An id this hub cannot resume from (older than what it kept, from another replica
or from before a restart, or events were not even built meanwhile: nobody listened) gets one `resync`
event instead — list again, then follow — with the id of the newest event, so that the next reconnect
resumes from there.

A subscriber that falls too far behind is disconnected rather than slowing the BBS down: it reconnects
(resuming, or told to resync), as a Diego event consumer would.

What a follower costs the BBS is bytes written (TLS and the socket, per follower), so a stream whose client
accepts gzip (browsers', httpx's and aiohttp's do) is sent gzipped from segments each batch deflates once
for all (bbs/sse_gzip.py): about a seventh of the bytes. Either way a batch goes out in pieces of at most
PIECE_BYTES: a publish can hold thousands of events, and one write of several MB to each follower cost
about four times what the same bytes cost in pieces (TLS's buffers growing, copies of a body that large).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json

from .records import iso
from .redact import masked_env
from .sse_gzip import GzipBody, Segment, segment

HEARTBEAT_S = 15.0
QUEUE_CHUNKS = 1000
REPLAY_EVENTS = (
    10_000  # kept for Last-Event-ID: a few seconds of a 10,000-instance push, minutes of a quiet one
)
# Events are built for this long after the last subscriber left (none would otherwise be:
# bbs/unit_of_work.py), so that a client reconnecting within it resumes instead of resyncing.
LINGER_S = 60.0
RESYNC = "resync"
PIECE_BYTES = 64 * 1024
DEFLATE_IN_THREAD_ABOVE = 64 * 1024  # below this a thread's hand-over costs more than deflating here
# What is published within this long goes to the subscribers as one batch: a follower costs the BBS a few
# writes per FLUSH_S, not one per publish (a 100-instance desire is one publish; a push is hundreds a second).
FLUSH_S = 0.02
CONNECTED = b": connected\n\n"  # lets the client see the subscription is live
HEARTBEAT = b": heartbeat\n\n"
TOO_MANY = b": too many subscribers\n\n"


def event(kind: str, data: dict[str, Any], at: float | None = None) -> dict[str, Any]:
    """One Event (common.models.Event) as plain data. Every event is built here, so this is where env
    values are masked: no SSE or NATS subscriber, admin or not, ever gets them (bbs/redact.py)."""
    return {"type": kind, "data": masked_env(data), "at": iso(time.time() if at is None else at)}


def sse_text(events: Iterable[dict[str, Any]]) -> bytes:
    # pydantic-core's encoder: the JSON json.dumps makes (compact; UTF-8 where json.dumps would escape), in
    # a quarter of the time, which counts at 10,000+ events a second.
    return b"".join(b"id: %s\nevent: %s\ndata: %s\n\n" % (e["id"].encode(), e["type"].encode(), to_json(e))
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
    """The events of one publish call, numbered from `first`; its SSE text and that text deflated are each
    built once, when first asked for, and shared by every unfiltered subscriber."""

    first: int
    events: list[dict[str, Any]]
    flushed_at: float = 0.0  # epoch seconds: when it went to the subscribers (and the replay buffer)
    _text: bytes | None = field(default=None, repr=False)
    _segment: asyncio.Future[Segment] | None = field(default=None, repr=False)

    @property
    def last(self) -> int:
        return self.first + len(self.events) - 1

    @property
    def text(self) -> bytes:
        if self._text is None:
            self._text = sse_text(self.events)
        return self._text

    async def segment(self) -> Segment:
        if self._segment is None:
            self._segment = asyncio.ensure_future(deflated(self.text))
        return await asyncio.shield(self._segment)  # a subscriber that leaves meanwhile leaves it to the rest

    def whole_for(self, seq: int, wanted: EventFilter) -> bool:
        """Whether a subscriber that last saw `seq` and wants `wanted` gets all of this batch."""
        return seq < self.first and wanted.everything

    def after(self, seq: int, wanted: EventFilter) -> bytes:
        """The SSE text of this batch's events numbered after `seq` that `wanted` matches."""
        if self.whole_for(seq, wanted):
            return self.text
        return sse_text(e for e in self.events[max(0, seq + 1 - self.first):] if wanted.matches(e))


async def deflated(text: bytes) -> Segment:
    """`text` as a Segment; a large one deflated in a worker thread, beside the event loop (zlib lets go of
    the GIL while it works: on a 10,000-instance push that is most of a second core's worth of events)."""
    if len(text) < DEFLATE_IN_THREAD_ABOVE:
        return segment(text)
    return await asyncio.to_thread(segment, text)


class _Plain:
    """A stream's body as it is (Content-Encoding: identity)."""

    def start(self) -> bytes:
        return b""

    async def batch(self, batch: Batch, seq: int, wanted: EventFilter) -> bytes:
        return batch.after(seq, wanted)

    async def own(self, text: bytes) -> bytes:
        return text

    def end(self) -> bytes:
        return b""


class _Gzipped:
    """A stream's body gzipped: a batch every unfiltered subscriber gets is its shared segment; what is this
    subscriber's own (a filtered pick, a replay's part, a comment) is deflated here."""

    def __init__(self) -> None:
        self.body = GzipBody()

    def start(self) -> bytes:
        return self.body.header()

    async def batch(self, batch: Batch, seq: int, wanted: EventFilter) -> bytes:
        if batch.whole_for(seq, wanted):
            return self.body.add(await batch.segment())
        return await self.own(batch.after(seq, wanted))

    async def own(self, text: bytes) -> bytes:
        return self.body.add(await deflated(text)) if text else b""

    def end(self) -> bytes:
        return self.body.end()


def _pieces(data: bytes) -> Iterator[memoryview]:
    view = memoryview(data)
    for at in range(0, len(view), PIECE_BYTES):
        yield view[at:at + PIECE_BYTES]


_CLOSED = Batch(-1, [])  # sentinel: the stream ends


class EventHub:
    def __init__(self, heartbeat_s: float = HEARTBEAT_S, queue_chunks: int = QUEUE_CHUNKS,
                 replay_events: int = REPLAY_EVENTS, linger_s: float = LINGER_S,
                 flush_s: float = FLUSH_S) -> None:
        self.heartbeat_s = heartbeat_s
        self.flush_s = flush_s
        self.queue_chunks = queue_chunks
        self.replay_events = replay_events
        self.linger_s = linger_s
        # This process's events are told apart from another replica's, or a previous run's, by this.
        self.epoch = f"{int(time.time()):x}{secrets.token_hex(3)}"
        self._seq = 0  # the last number given to an event (or skipped: `missed`)
        self._kept: deque[Batch] = deque()  # the replay buffer, oldest first
        self._kept_events = 0
        self._pending: Batch | None = None  # published, not yet handed to the subscribers: `_flush`
        self._subscribers: set[asyncio.Queue[Batch]] = set()
        self._sinks: list[Callable[[list[dict[str, Any]]], None]] = []
        self._closed = False
        self._linger_until = 0.0
        # Every event built since then is kept (epoch seconds): moved on when the kept ones are cleared
        # (`missed`) or the oldest dropped. What is older is the apps' stories' (bbs/recent_past.py).
        self.covered_since = time.time()

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
        """Number the events and hand them to the sinks now; to the subscribers with whatever else is
        published within flush_s, as one batch (see FLUSH_S)."""
        if not events:
            return
        first = self._seq + 1
        for seq, e in enumerate(events, first):
            e["id"] = f"{self.epoch}-{seq}"
        self._seq += len(events)
        for sink in self._sinks:
            sink(events)
        if self._pending is not None:
            self._pending.events.extend(events)
            return
        self._pending = Batch(first, list(events))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a synchronous caller (no loop): nothing to wait for
            loop = None
        if loop is None or self.flush_s <= 0:
            self._flush()
        else:
            loop.call_later(self.flush_s, self._flush)

    def _flush(self) -> None:
        batch, self._pending = self._pending, None
        if batch is None:
            return
        batch.flushed_at = time.time()
        self._keep(batch)
        for queue in list(self._subscribers):
            try:
                queue.put_nowait(batch)
            except asyncio.QueueFull:
                self._drop(queue)

    def missed(self) -> None:
        """Changes were committed whose events were not built (nobody listened): nothing kept can be
        resumed from any more, so every Last-Event-ID before now gets a resync."""
        self._flush()
        self._kept.clear()
        self._kept_events = 0
        self.covered_since = time.time()
        self._seq += 1  # the skipped events' place: an id from before it is not the newest any more

    def _keep(self, batch: Batch) -> None:
        self._kept.append(batch)
        self._kept_events += len(batch.events)
        while self._kept_events - len(self._kept[0].events) >= self.replay_events:
            dropped = self._kept.popleft()
            self._kept_events -= len(dropped.events)
            self.covered_since = dropped.flushed_at

    def recent(self, limit: int, wanted: EventFilter = EventFilter()) -> list[dict[str, Any]]:
        """The last `limit` events kept (and not yet flushed) that `wanted` matches, oldest first: what a
        client that just came shows of what happened before it (GET /v1/events/recent). Newest batches are
        read first, so a small limit costs little whatever the number kept."""
        found: list[dict[str, Any]] = []
        batches = [*self._kept, *([self._pending] if self._pending is not None else [])]
        for batch in reversed(batches):
            for e in reversed(batch.events):
                if wanted.matches(e):
                    found.append(e)
                    if len(found) >= limit:
                        return found[::-1]
        return found[::-1]

    def _resumable_from(self) -> int:
        """The oldest seq a client may have last seen and still get everything after it."""
        oldest = self._kept[0] if self._kept else self._pending
        return oldest.first - 1 if oldest is not None else self._seq

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
        self._flush()
        self._closed = True
        for queue in list(self._subscribers):
            self._drop(queue)

    def full(self, max_subscribers: int) -> bool:
        """Whether another subscriber would be one too many (the API answers 429 then)."""
        return len(self._subscribers) >= max_subscribers

    def _resync(self, last_event_id: str) -> bytes:
        reason = ("from another BBS replica or an earlier run of this one"
                  if last_event_id.rpartition("-")[0] != self.epoch else "older than the events kept")
        resync = event(RESYNC, {"last_event_id": last_event_id[:100], "reason": reason})
        resync["id"] = self.last_id
        return sse_text([resync])

    async def follow(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The events published from now on, a batch at a time, and an empty list every heartbeat_s: for a
        stream that renders them its own way (bbs/diego/events.py). Ends when the hub closes or drops it."""
        queue: asyncio.Queue[Batch] = asyncio.Queue(self.queue_chunks)
        if self._closed:
            return
        self._subscribers.add(queue)
        seen = self._seq
        try:
            while True:
                try:
                    batch = await asyncio.wait_for(queue.get(), timeout=self.heartbeat_s)
                except TimeoutError:
                    yield []
                    continue
                if batch is _CLOSED:
                    return
                yield batch.events[max(0, seen - batch.first + 1):]
                seen = max(seen, batch.last)
        finally:
            self._unsubscribe(queue)

    async def stream(self, max_subscribers: int | None = None, wanted: EventFilter = EventFilter(),
                     last_event_id: str | None = None, gzip: bool = False) -> AsyncIterator[memoryview]:
        """One subscriber's body (SSE, gzipped when `gzip`): what it missed since `last_event_id` (or a
        resync), then events as they come, a comment line every heartbeat_s; each piece at most PIECE_BYTES.
        A stream that begins when `max_subscribers` already follow ends at once (the API checks `full`
        first: this holds the bound for requests that raced past that check)."""
        encoding = _Gzipped() if gzip else _Plain()
        queue: asyncio.Queue[Batch] = asyncio.Queue(self.queue_chunks)
        if self._closed:
            return
        if max_subscribers is not None and self.full(max_subscribers):
            yield memoryview(encoding.start() + await encoding.own(TOO_MANY) + encoding.end())
            return
        # Subscribed and the replay taken in one step (no await between): every event is in exactly one.
        self._subscribers.add(queue)
        # `seen`: the newest event this subscriber has had, or is not to have (published before it came).
        seen, resync = self._seq, None
        missed: list[Batch] = []
        if last_event_id is not None:
            after = self._resume_point(last_event_id)
            if after is None:
                resync = self._resync(last_event_id)
            else:
                seen = after
                missed.extend(b for b in self._kept if b.last > after)
        try:
            yield memoryview(encoding.start() + await encoding.own(CONNECTED))
            if resync is not None:
                yield memoryview(await encoding.own(resync))
            for batch in missed:
                for piece in _pieces(await encoding.batch(batch, seen, wanted)):
                    yield piece
                seen = batch.last
            while True:
                try:
                    batch = await asyncio.wait_for(queue.get(), timeout=self.heartbeat_s)
                except TimeoutError:
                    yield memoryview(await encoding.own(HEARTBEAT))
                    continue
                if batch is _CLOSED:
                    yield memoryview(encoding.end())
                    return
                for piece in _pieces(await encoding.batch(batch, seen, wanted)):
                    yield piece
                seen = max(seen, batch.last)
        finally:
            self._unsubscribe(queue)
