"""What each instance uses: memory and CPU from its cgroup, disk from its directory (GET /usage).

The process executor samples all of its instances in one round every few seconds (one worker thread, a
couple of small files per instance: no request per instance, nothing when nobody runs), and keeps the
last two samples of each: CPU is the delta of the cgroup's CPU time between them over the wall time
between them (a fraction of one core: 1.5 is one and a half cores busy). The BBS asks a rep for the
latest figures only when a client asks (docs/usage.md); the sim executor has none.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of an instance's counters."""

    wall_ns: int  # time.monotonic_ns() when read
    cpu_ns: int | None  # cumulative CPU time of its cgroup; None when nothing accounts it
    memory_bytes: int
    disk_bytes: int
    at: float  # Unix time when read (sampled_at)


def cpu_fraction(previous: Sample | None, current: Sample) -> float | None:
    """CPU used between two samples over the wall time between them (cores busy); None without two
    samples, when the counter is missing, or when it went back (a new cgroup under the same guid)."""
    if previous is None or previous.cpu_ns is None or current.cpu_ns is None:
        return None
    wall = current.wall_ns - previous.wall_ns
    used = current.cpu_ns - previous.cpu_ns
    if wall <= 0 or used < 0:
        return None
    return used / wall


@dataclass(frozen=True, slots=True)
class Limits:
    memory_bytes: int
    disk_bytes: int


@dataclass(frozen=True, slots=True)
class InstanceUsage:
    """An instance's latest figures, as GET /usage answers them."""

    process_guid: str
    index: int
    instance_guid: str
    cpu: float | None
    memory_bytes: int
    memory_limit_bytes: int
    disk_bytes: int
    disk_limit_bytes: int
    sampled_at: float

    def as_json(self, cell_id: str) -> dict[str, object]:
        return {
            "process_guid": self.process_guid, "index": self.index, "instance_guid": self.instance_guid,
            "cell_id": cell_id, "cpu": None if self.cpu is None else round(self.cpu, 6),
            "memory_bytes": self.memory_bytes, "memory_limit_bytes": self.memory_limit_bytes,
            "disk_bytes": self.disk_bytes, "disk_limit_bytes": self.disk_limit_bytes,
            "sampled_at": rfc3339(self.sampled_at),
        }


def rfc3339(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Watched:
    """What the sampler needs of one instance: who it is, its limits, and how to read it."""

    process_guid: str
    index: int
    limits: Limits
    read: Callable[[], tuple[int | None, int, int]]  # (cpu_ns, memory_bytes, disk_bytes)


class UsageBook:
    """The last two samples of every watched instance; `sample_all` reads them all in one round."""

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock = clock
        self._watched: dict[str, Watched] = {}
        self._samples: dict[str, tuple[Sample | None, Sample]] = {}

    def watch(self, instance_guid: str, watched: Watched) -> None:
        self._watched[instance_guid] = watched

    def unwatch(self, instance_guid: str) -> None:
        self._watched.pop(instance_guid, None)
        self._samples.pop(instance_guid, None)

    def sample_all(self) -> None:
        """One round (blocking file reads: run it in a worker thread). A read that fails skips the
        instance this round (it is being stopped, its cgroup going)."""
        for guid, w in list(self._watched.items()):
            try:
                cpu_ns, memory, disk = w.read()
            except OSError:
                continue
            sample = Sample(self._clock(), cpu_ns, memory, disk, time.time())
            before = self._samples.get(guid)
            if guid in self._watched:  # not unwatched meanwhile
                self._samples[guid] = (before[1] if before else None, sample)
        for guid in self._samples.keys() - self._watched.keys():  # unwatched between the check and the write
            self._samples.pop(guid, None)

    def usage(self) -> list[InstanceUsage]:
        found = []
        for guid, w in list(self._watched.items()):
            pair = self._samples.get(guid)
            if pair is None:
                continue
            previous, latest = pair
            found.append(InstanceUsage(w.process_guid, w.index, guid, cpu_fraction(previous, latest),
                                       latest.memory_bytes, w.limits.memory_bytes, latest.disk_bytes,
                                       w.limits.disk_bytes, latest.at))
        return found
