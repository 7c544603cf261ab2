"""Which instances' output the rep can serve, and their records (rep/log_records.py) as asked.

Every container the process executor starts is registered here with its OutputLog while it runs; an
instance that crashed stays (its records read from its kept directory) until that directory is removed:
when the rep stops (isolated), or when it starts again (unisolated: its leftovers are removed). A stopped
instance, or a finished task, is forgotten with its directory.

The rep serves these to the BBS only (rep/policy.py): logs can hold whatever an app printed, secrets
included; the BBS checks who may read them (docs/security.md).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .log_records import MAX_LINE_BYTES, Record, StreamCode, parse
from .log_stream import Follower, Origin
from .output_log import LOG_NAMES, ROTATED_NAME, OutputLog

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ_MAX_BYTES = 64 * 1024 * 1024  # of a kept log: more than any cap the rep writes


@dataclass(slots=True, eq=False)
class LogSource:
    origin: Origin
    directory: Path
    output: OutputLog | None = None  # while it runs; None once only its kept directory holds its records
    followers: set[Follower] = field(default_factory=set)

    def data(self, limit: int | None = None) -> bytes:
        if self.output is not None:
            return self.output.snapshot(limit)
        return read_kept(self.directory, limit)


@dataclass(frozen=True, slots=True)
class LogQuery:
    """What a reader asks: an app's instances (one index, or all) or a task; the last `recent` records
    since `since_ns`, of one stream or both."""

    process_guid: str = ""
    index: int | None = None
    task_guid: str = ""
    recent: int = 100
    since_ns: int = 0
    stream: StreamCode | None = None

    def matches(self, origin: Origin) -> bool:
        if self.task_guid:
            return not origin.process_guid and origin.guid == self.task_guid
        return origin.process_guid == self.process_guid and self.index in (None, origin.index)

    def keeps(self, record: Record) -> bool:
        return record.ns > self.since_ns and (self.stream is None or record.stream == self.stream)


class LogBook:
    """The sources of one cell's executor, and the live followers of them."""

    def __init__(self) -> None:
        self._sources: dict[str, LogSource] = {}
        self._followers: set[Follower] = set()

    def started(self, origin: Origin, directory: Path, output: OutputLog) -> None:
        """A container spawned: its records go to the followers that want its origin as they are written."""
        source = LogSource(origin, directory, output)
        self._sources[origin.guid] = source
        output.on_records = lambda records: self._deliver(source, records)

    def released(self, guid: str, *, kept: bool) -> None:
        """A container ended: `kept`, its directory stays with its logs; else it is forgotten."""
        source = self._sources.get(guid)
        if source is None:
            return
        source.output = None
        if not kept:
            del self._sources[guid]
        for follower in list(self._followers):
            if follower.ends_with and follower.ends_with == guid and not source.origin.process_guid:
                follower.end()  # a task's follower ends with the task; an app's follows its next instances

    def forget_all(self) -> None:
        self._sources.clear()
        for follower in list(self._followers):
            follower.end()

    def sources(self, query: LogQuery) -> list[LogSource]:
        return [s for s in self._sources.values() if query.matches(s.origin)]

    def attach(self, follower: Follower) -> None:
        """Offer `follower` what this book's containers write from now on (attached before the history is
        read: its reader drops what it saw twice, by timestamp)."""
        self._followers.add(follower)

    def detach(self, follower: Follower) -> None:
        self._followers.discard(follower)

    @property
    def follower_count(self) -> int:
        return len(self._followers)

    def _deliver(self, source: LogSource, records: list[Record]) -> None:
        for follower in self._followers:
            if follower.wanted(source.origin):
                follower.offer(source.origin, records)


def history(sources: Iterable[LogSource], query: LogQuery) -> tuple[list[tuple[Origin, Record]],
                                                                     dict[str, int]]:
    """The last `query.recent` records of the sources that `query` keeps, in time order, and the stamp of
    the last record each source had (a follower's records up to it are already in the history)."""
    chosen: list[list[tuple[int, int, Origin, Record]]] = []
    seen: dict[str, int] = {}
    # Unfiltered, the last records are at the end: read only as much as they can take.
    limit = None if query.since_ns or query.stream else query.recent * (MAX_LINE_BYTES + 32) + 1024
    for number, source in enumerate(sources):
        try:
            records = parse(source.data(limit))
        except OSError:  # a descriptor closed as the container ended: read what is kept
            records = parse(read_kept(source.directory, limit))
        seen[source.origin.guid] = records[-1].ns if records else 0
        kept = [r for r in records if query.keeps(r)][-query.recent:] if query.recent > 0 else []
        chosen.append([(r.ns, number, source.origin, r) for r in kept])
    merged = list(heapq.merge(*chosen, key=lambda item: item[0]))
    if query.recent > 0:
        merged = merged[-query.recent:]
    else:
        merged = []
    return [(origin, record) for _, _, origin, record in merged], seen


def read_kept(directory: Path, limit: int | None = None) -> bytes:
    """The records of a kept directory (output.log.1 then output.log), through descriptors opened without
    following links, regular files with one link only: never a file the app pointed its log at."""
    parts: list[bytes] = []
    try:
        dir_fd = os.open(directory, _DIR_FLAGS)
    except OSError:
        return b""
    try:
        for name in (ROTATED_NAME, *[n for n in LOG_NAMES if n != ROTATED_NAME]):
            with contextlib.suppress(OSError):
                parts.append(_read_regular(name, dir_fd))
    finally:
        os.close(dir_fd)
    data = b"".join(parts)
    return data[-limit:] if limit is not None else data


def _read_regular(name: str, dir_fd: int) -> bytes:
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return b""
        return os.pread(fd, min(info.st_size, READ_MAX_BYTES), max(0, info.st_size - READ_MAX_BYTES))
    finally:
        os.close(fd)

