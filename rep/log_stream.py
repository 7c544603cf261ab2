"""A live follower of instances' output: what the output pumps hand it, bounded, until its reader takes it.

The rep never waits for a reader: a pump offers each batch of records to every follower and moves on.
A follower holds at most `max_bytes` of records its reader has not taken yet; one more batch and it is
dropped (its pending records freed at once, its reader told so and its stream ended). So a reader that
stops reading (a slow BBS, a stalled client behind it) costs the rep at most `max_bytes`, never more.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from .log_records import STREAM_NAMES, Record

FOLLOWER_MAX_BYTES = 4 * 1024 * 1024  # records a follower holds for its reader before it is dropped
RECORD_OVERHEAD = 160  # what a held record costs besides its text (the object, its bytes, the list slot)
DROPPED = "dropped: the reader fell behind"


@dataclass(frozen=True, slots=True)
class Origin:
    """Whose output a record is: an instance (process_guid and index) or a task (its guid)."""

    guid: str  # the instance guid, or the task guid
    cell_id: str
    process_guid: str = ""
    index: int = -1


class Follower:
    """Records offered by the pumps, in the order offered, for one reader. `wanted(origin)` says which
    origins this follower hears; `end()` ends it (its reader sees the end once it took what is pending)."""

    def __init__(self, wanted: Callable[[Origin], bool], max_bytes: int = FOLLOWER_MAX_BYTES,
                 ends_with: str = "") -> None:
        self.wanted = wanted
        self.ends_with = ends_with  # a task's guid: the follower ends when the task does
        self.max_bytes = max_bytes
        self.pending_bytes = 0
        self.dropped = False
        self.done = False
        self._pending: deque[tuple[Origin, list[Record]]] = deque()
        self._wake = asyncio.Event()

    def offer(self, origin: Origin, records: list[Record]) -> None:
        if self.dropped or self.done:
            return
        size = sum(len(r.text) + RECORD_OVERHEAD for r in records)
        if self.pending_bytes + size > self.max_bytes:
            self.dropped = True
            self._pending.clear()
            self.pending_bytes = 0
        else:
            self._pending.append((origin, records))
            self.pending_bytes += size
        self._wake.set()

    def end(self) -> None:
        self.done = True
        self._wake.set()

    async def batches(self) -> AsyncIterator[list[tuple[Origin, list[Record]]]]:
        """Everything pending at each wake-up, as it comes (one write for many instances' lines under
        load); returns when ended (after what was pending) or dropped."""
        while True:
            if self._pending and not self.dropped:
                taken = list(self._pending)
                self._pending.clear()
                self.pending_bytes = 0
                yield taken
                continue
            if self.dropped or self.done:
                return
            self._wake.clear()
            await self._wake.wait()


def record_line(origin: Origin, record: Record) -> bytes:
    """One record as the rep serves it: a JSON line naming its instance (or task), cell and stream."""
    line = {"ns": record.ns, "stream": STREAM_NAMES[record.stream], "text": record.decoded(),
            "cell_id": origin.cell_id, "guid": origin.guid}
    if origin.process_guid:
        line["process_guid"], line["index"] = origin.process_guid, origin.index
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def end_line(reason: str) -> bytes:
    """The last line of a stream the rep ended for a reason of its own (the reader fell behind)."""
    return json.dumps({"end": reason}).encode() + b"\n"
