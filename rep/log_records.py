"""An instance's output as timestamped records, one a line: `<unix_ns> <o|e> <text>\n`.

The rep reads the child's stdout and stderr from two pipes and cuts each into lines; every line becomes a
record stamped when the rep read it (strictly increasing per instance, so a reader can resume after the
last one it saw), `o` for stdout and `e` for stderr. A line longer than MAX_LINE_BYTES is cut into
records of that size; a last line without a newline is written when the pipe closes. The text is what the
app wrote, bytes as they came (never a newline): decoded leniently only when read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

StreamCode = Literal["o", "e"]
STDOUT: StreamCode = "o"
STDERR: StreamCode = "e"
STREAM_NAMES: dict[str, str] = {STDOUT: "stdout", STDERR: "stderr"}
MAX_LINE_BYTES = 16 * 1024  # a longer line is cut: a record (and a reader's buffer) stays small


@dataclass(frozen=True, slots=True)
class Record:
    ns: int  # when the rep read it, Unix time in nanoseconds
    stream: StreamCode
    text: bytes  # without its newline

    def encode(self) -> bytes:
        return b"%d %s %s\n" % (self.ns, self.stream.encode(), self.text)

    def decoded(self) -> str:
        return self.text.decode("utf-8", errors="replace")


class Clock:
    """Nanosecond stamps, strictly increasing (two lines read in the same nanosecond stay in order)."""

    def __init__(self) -> None:
        self.last = 0

    def __call__(self) -> int:
        self.last = max(time.time_ns(), self.last + 1)
        return self.last


class LineSplitter:
    """One stream's bytes, as they come in chunks, cut into lines (a partial line waits for the next)."""

    def __init__(self, stream: StreamCode) -> None:
        self.stream = stream
        self._partial = b""

    def feed(self, data: bytes, stamp: Clock) -> list[Record]:
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        records = [r for line in lines for r in self._cut(line, stamp)]
        while len(self._partial) >= MAX_LINE_BYTES:
            records.append(Record(stamp(), self.stream, self._partial[:MAX_LINE_BYTES]))
            self._partial = self._partial[MAX_LINE_BYTES:]
        return records

    def flush(self, stamp: Clock) -> list[Record]:
        """What is left without a newline, once the pipe closed."""
        partial, self._partial = self._partial, b""
        return list(self._cut(partial, stamp)) if partial else []

    def _cut(self, line: bytes, stamp: Clock) -> Iterator[Record]:
        if len(line) <= MAX_LINE_BYTES:
            yield Record(stamp(), self.stream, line)
            return
        for start in range(0, len(line), MAX_LINE_BYTES):
            yield Record(stamp(), self.stream, line[start : start + MAX_LINE_BYTES])


def parse(data: bytes) -> list[Record]:
    """The whole records in `data` (bytes of a log file, or a part of one). A line that is not a record
    (a torn first line of a part, anything the app put in place of its log) is skipped."""
    records = []
    for line in data.split(b"\n")[:-1]:
        stamp, _, rest = line.partition(b" ")
        stream, _, text = rest.partition(b" ")
        if stamp.isdigit() and stream in (b"o", b"e") and len(rest) >= 2 and rest[1:2] == b" ":
            records.append(Record(int(stamp), "o" if stream == b"o" else "e", text))
    return records


def as_text(records: Iterable[Record]) -> str:
    """The records as the app printed them, stdout and stderr interleaved, one line each."""
    return "".join(r.decoded() + "\n" for r in records)
