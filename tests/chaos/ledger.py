"""The workload's ledger: every write it sent the BBS and what came of it, and from that, what the BBS must
show.

    ledger = Ledger()
    write = ledger.begin("scale", "app-3", instances=2)     # before the request leaves
    ledger.end(write, ACKNOWLEDGED, status=200)              # a 2xx: the BBS said it is done
    ledger.expectations().lrps["app-3"]                     # frozenset({2}): the only acceptable state

Outcomes:
- ACKNOWLEDGED (2xx): the write happened; it must be there afterwards, until a later acknowledged write
  to the same app replaces it.
- REFUSED (4xx): the BBS said no; the write must not show.
- NOT_SENT: no connection could be made to any BBS (refused, or no TCP/TLS handshake within the timeout):
  the request never left, the write cannot have happened.
- UNKNOWN (a timeout or a broken connection after the request left, or a 5xx): it may have happened, or
  may still happen later (a stalled BBS commits once it runs again). Either state is acceptable from then
  on, and the workload leaves that app alone (it is quarantined: a later write could be undone by the late
  commit of this one, and that would not be a lost write) until it RESOLVES it: long after (past the BBS's
  request timeout, when the request is over on the BBS's side for sure), it reads what the BBS shows and
  writes that down as a "resolve", acknowledged; from then on that state is the app's, as after any
  acknowledged write.
A write still IN_FLIGHT is acceptable either way too: the checker computes its expectations before it reads
the BBS, so a write acknowledged after that read is not required to show in it.

States of an app: its number of instances, or ABSENT (never created, or deleted). A task: PRESENT or ABSENT.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

ACKNOWLEDGED = "acknowledged"
REFUSED = "refused"
NOT_SENT = "not_sent"
UNKNOWN = "unknown"
IN_FLIGHT = "in_flight"
OUTCOMES = (ACKNOWLEDGED, REFUSED, NOT_SENT, UNKNOWN)

ABSENT = None  # the state of an app or task that is not in the BBS
PRESENT = "present"  # the state of a task that is

LRP_WRITES = ("desire", "scale", "delete", "resolve")
TASK_WRITES = ("task",)


@dataclass
class Write:
    seq: int
    kind: str  # "desire" | "scale" | "delete" | "task"
    guid: str  # the app's process_guid or the task's task_guid
    instances: int | None  # what a desire, a scale or a resolve sets; None for a delete, a task, an absence
    started: float  # time.monotonic() before the request left
    ended: float | None = None
    outcome: str = IN_FLIGHT
    status: int | None = None  # the HTTP status, when there was an answer
    detail: str = ""  # the error, or the refusal's body

    @property
    def state(self) -> int | str | None:
        """What the write makes the BBS show for its guid (a resolve: what the BBS showed)."""
        if self.kind == "delete":
            return ABSENT
        return PRESENT if self.kind == "task" else self.instances

    def describe(self) -> str:
        took = f" after {self.ended - self.started:.2f}s" if self.ended is not None else ""
        status = f" {self.status}" if self.status is not None else ""
        return (
            f"#{self.seq} {self.kind} {self.guid}{'' if self.instances is None else f' ={self.instances}'}: "
            f"{self.outcome}{status}{took}{f' ({self.detail})' if self.detail else ''}"
        )


@dataclass(frozen=True)
class Expectations:
    """Guid -> the states the BBS may show for it; for each, the acknowledged write that pins it (if any)."""

    lrps: dict[str, frozenset[int | None]]
    tasks: dict[str, frozenset[str | None]]
    pinned_by: dict[str, Write]  # guid -> its last acknowledged write, when its state is that write's alone


@dataclass
class Ledger:
    writes: list[Write] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, kind: str, guid: str, instances: int | None = None) -> Write:
        if kind not in LRP_WRITES + TASK_WRITES:
            raise ValueError(f"kind: one of {LRP_WRITES + TASK_WRITES}, got {kind!r}")
        with self._lock:
            write = Write(len(self.writes), kind, guid, instances, time.monotonic())
            self.writes.append(write)
            return write

    def end(self, write: Write, outcome: str, status: int | None = None, detail: str = "") -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome: one of {OUTCOMES}, got {outcome!r}")
        with self._lock:
            write.outcome, write.status, write.detail = outcome, status, detail[:300]
            write.ended = time.monotonic()

    def snapshot(self) -> list[Write]:
        with self._lock:
            return [
                Write(**{name: getattr(w, name) for name in Write.__dataclass_fields__}) for w in self.writes
            ]

    def quarantined(self, kinds: tuple[str, ...] = LRP_WRITES + TASK_WRITES) -> dict[str, float]:
        """The guids with a write of one of `kinds` of unknown outcome, not resolved since -> when that write
        ended: the workload leaves them alone."""
        found: dict[str, float] = {}
        with self._lock:
            for write in self.writes:
                if write.outcome == UNKNOWN and write.kind in kinds:
                    found[write.guid] = write.ended or write.started
                elif write.kind == "resolve" and write.outcome == ACKNOWLEDGED:
                    found.pop(write.guid, None)
        return found

    def expectations(self) -> Expectations:
        return expectations_of(self.snapshot())

    def counts(self) -> dict[str, dict[str, int]]:
        """kind -> outcome -> writes."""
        with self._lock:
            by_kind: dict[str, Counter[str]] = {}
            for write in self.writes:
                by_kind.setdefault(write.kind, Counter())[write.outcome] += 1
        return {kind: dict(outcomes) for kind, outcomes in sorted(by_kind.items())}


def expectations_of(writes: list[Write]) -> Expectations:
    """Replay the writes in the order they were sent (one at a time per guid: the workload is sequential)."""
    states: dict[str, set] = {}
    uncertain: set[str] = set()
    pinned_by: dict[str, Write] = {}
    for write in writes:
        acceptable = states.setdefault(write.guid, {ABSENT})
        if write.kind == "resolve" and write.outcome == ACKNOWLEDGED:
            uncertain.discard(write.guid)
        if write.outcome == ACKNOWLEDGED and write.guid not in uncertain:
            acceptable.clear()
            acceptable.add(write.state)
            pinned_by[write.guid] = write
        elif write.outcome in (ACKNOWLEDGED, UNKNOWN, IN_FLIGHT):
            acceptable.add(write.state)
            pinned_by.pop(write.guid, None)
            if write.outcome != ACKNOWLEDGED:
                uncertain.add(write.guid)
    tasks = {w.guid for w in writes if w.kind in TASK_WRITES}
    return Expectations(
        lrps={guid: frozenset(s) for guid, s in states.items() if guid not in tasks},
        tasks={guid: frozenset(s) for guid, s in states.items() if guid in tasks},
        pinned_by=pinned_by,
    )


def missing_writes(expected: Expectations, desired: dict[str, int], tasks: set[str]) -> dict[str, str]:
    """Guid -> what is wrong, for every guid whose state in the BBS (`desired`: process_guid -> instances;
    `tasks`: the task guids it lists) is not one the ledger accepts."""
    wrong: dict[str, str] = {}
    for guid, acceptable in expected.lrps.items():
        shown = desired.get(guid, ABSENT)
        if shown not in acceptable:
            wrong[guid] = _wrong(guid, shown, acceptable, expected)
    for guid, acceptable in expected.tasks.items():
        shown_task = PRESENT if guid in tasks else ABSENT
        if shown_task not in acceptable:
            wrong[guid] = _wrong(guid, shown_task, acceptable, expected)
    return wrong


def _wrong(guid: str, shown: object, acceptable: frozenset, expected: Expectations) -> str:
    def name(state: object) -> str:
        return "absent" if state is ABSENT else str(state)

    because = expected.pinned_by.get(guid)
    return (f"the BBS shows {name(shown)}, expected {' or '.join(sorted(map(name, acceptable)))}"
            f"{f' after {because.describe()}' if because is not None else ''}")
