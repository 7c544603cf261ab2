"""Server-sent events, read: the one parser of the BBS's event stream (GET /v1/events) for every client
of it (deploy/bbs_client.py, the simulator's watcher, the end-to-end tests' event log, the benchmarks).

It follows the WHATWG HTML standard, "Interpreting an event stream": the stream is UTF-8 (a leading BOM
ignored), lines end in CRLF, LF or CR (and nothing else: a U+2028 inside an event's JSON is data), a line
starting with a colon is a comment, `field: value` loses one space after the colon, `data` lines join with
LF, `id` sets the last event id (not when it holds NUL; it counts from the next blank line, and holds for
the events after), `retry` (ASCII digits only) sets the reconnection time, other fields are ignored, an
event is dispatched only on a blank line and only when some data came (an `id` alone updates the last
event id), and an event left unterminated when the stream ends is discarded, its id with it.

Not httpx-sse: its decoder dispatches an empty event on every blank line once an id has been seen (so
each of the BBS's `: heartbeat` comments comes out as an event, where the standard dispatches nothing),
and it reads the httpx response itself, so a caller never sees the bytes before the first event (the
end-to-end event log counts itself subscribed at the BBS's opening `: connected` comment).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

_BOM = "\ufeff"
_LINE_END = re.compile("\r\n|\r|\n")  # only these: str.splitlines() also splits at U+2028 and others


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    type: str  # the `event` field, "message" when it had none
    data: str
    last_event_id: str  # the stream's last event id when this event was dispatched ("" if none yet)


class EventStreamParser:
    """Bytes in (any chunking), events out. `last_event_id` and `retry_ms` are the stream's state, what a
    client reconnecting sends back (Last-Event-ID) and how long it waits first (None: never said)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False  # past the stream's first character (where a BOM is dropped)
        self._partial: list[str] = []  # the current line's text so far, not yet ended
        self._after_cr = False  # the text so far ended in CR: an LF next completes that CRLF, no new line
        self._type = ""
        self._data: list[str] = []
        self._id = ""  # the id field's latest value: the last event id from the next blank line on
        self.last_event_id = ""
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events `chunk` completes (a partial line or event waits for the next chunk)."""
        text = self._decoder.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix(_BOM)
        if self._after_cr and text.startswith("\n"):
            text = text[1:]
        self._after_cr = text.endswith("\r")
        lines = _LINE_END.split(text)
        if len(lines) == 1:
            self._partial.append(text)
            return []
        if self._partial:
            lines[0] = "".join(self._partial) + lines[0]
        rest = lines.pop()  # after the last line end: the next line's start
        self._partial = [rest] if rest else []
        events = []
        for line in lines:
            event = self._end_line(line)
            if event is not None:
                events.append(event)
        return events

    def _end_line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if value and value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        # The id counts from its event's blank line: a stream cut before it resumes from the previous id.
        self.last_event_id = self._id
        data, event_type = self._data, self._type
        self._data, self._type = [], ""
        if not data:
            return None
        return ServerSentEvent(event_type or "message", "\n".join(data), self.last_event_id)


def events(chunks: Iterable[bytes], parser: EventStreamParser | None = None) -> Iterator[ServerSentEvent]:
    """The events of a stream's bytes (e.g. httpx's `response.iter_bytes()`), each as soon as its blank
    line arrives. What is left unterminated when the chunks end is discarded, as the standard says."""
    parser = parser or EventStreamParser()
    for chunk in chunks:
        yield from parser.feed(chunk)


async def aevents(
    chunks: AsyncIterable[bytes], parser: EventStreamParser | None = None
) -> AsyncIterator[ServerSentEvent]:
    """`events` for an async stream (e.g. httpx's `response.aiter_bytes()`)."""
    parser = parser or EventStreamParser()
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
