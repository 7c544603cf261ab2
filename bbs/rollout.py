"""Rollouts: pure decisions, no I/O (Nomad's reconciler style: given the desired LRP, its actual instances and
the rollout's state, what to do next). The driver (bbs/rollouts.py) reads, calls `step`, and writes.

An index is replaced with the rebalancer's make-before-break move (bbs/rebalance_moves.py): the RUNNING
instance becomes EVACUATING and keeps serving, a replacement of the target version is auctioned (it may
land on another cell), and the lifecycle stops the old one once the replacement reports RUNNING (the rep
reports RUNNING only once the start health check passed). At most `max_in_flight` indices are replaced
at once, and only RUNNING instances are moved, so the healthy count never drops below the desired one.

A replacement that crashes, cannot be placed, or does not run within the start timeout fails the
rollout: every move in flight is abandoned (the old instances kept) and the rollout either rolls back to
the version it came from (`auto_revert`: the same moves, towards the old version) or pauses with the
reason. A rollback that fails in turn ends `failed`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .actual_set import ActualSet
from .lifecycle import Stop
from .rebalance_moves import abandon_move, move_outcome, start_move
from .records import RUNNING, ActualRecord, iso

RUNNING_STATE, PAUSED, COMPLETED = "running", "paused", "completed"
FAILED, ROLLING_BACK, ROLLED_BACK = "failed", "rolling_back", "rolled_back"
ACTIVE = frozenset({RUNNING_STATE, PAUSED, ROLLING_BACK})
MOVING = frozenset({RUNNING_STATE, ROLLING_BACK})  # the states in which indices are replaced
# A replacement refused by the cell holding its index's instance of the same version (a restart's, placed on
# the old one's cell: rep/cell.py SAME_INDEX): the move is dropped and tried again, up to RETRIES in all.
SAME_INDEX = "instance already on this cell"
RETRIES = 20
CANARY_REASON = "canary: one instance of the new version runs; resume to roll out the rest"


@dataclass(slots=True)
class Flight:
    """An index being replaced: when its move started, and the crash count its replacement started with."""

    started_at: float
    crash_count: int


@dataclass(slots=True)
class RolloutRecord:
    """A rollout as stored (the `rollouts` table's `data`) and decided on. Times are epoch seconds."""

    process_guid: str
    seq: int
    kind: str  # update | restart | rollback
    from_version: int
    to_version: int
    state: str
    total: int
    max_in_flight: int
    auto_revert: bool
    canary: bool
    started_at: float
    updated_at: float
    done: int = 0
    reason: str | None = None
    finished_at: float | None = None
    canary_passed: bool = False  # the canary ran and the rollout was resumed
    paused_from: str = ""  # the state a pause interrupted: where a resume goes back to
    retried: int = 0  # moves dropped and tried again (SAME_INDEX)
    in_flight: dict[int, Flight] = field(default_factory=dict)

    @property
    def target(self) -> int:
        """The version instances are moved to: the old one while rolling back."""
        return self.from_version if self.state == ROLLING_BACK else self.to_version

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_wire(self) -> dict[str, Any]:
        """The Rollout (common/models/rollout.py) the API and the `rollout_changed` event show."""
        return {
            "process_guid": self.process_guid,
            "kind": self.kind,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "max_in_flight": self.max_in_flight,
            "auto_revert": self.auto_revert,
            "canary": self.canary,
            "reason": self.reason,
            "started_at": iso(self.started_at),
            "updated_at": iso(self.updated_at),
            "finished_at": iso(self.finished_at),
        }

    def to_data(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["in_flight"] = {str(i): [f.started_at, f.crash_count] for i, f in self.in_flight.items()}
        return data

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RolloutRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        flights = data.get("in_flight", {})
        values["in_flight"] = {int(i): Flight(float(f[0]), int(f[1])) for i, f in flights.items()}
        return cls(**values)

    def summary(self) -> tuple[str, int, str | None]:
        """What a `rollout_changed` event is sent for a change of."""
        return self.state, self.done, self.reason


@dataclass(slots=True)
class Step:
    """What one look at a rollout decided: the actual LRP changes are in the ActualSet passed in."""

    starts: set[int] = field(default_factory=set)  # indices whose replacement is to be auctioned
    stops: list[Stop] = field(default_factory=list)  # replacements dropped
    failure: str | None = None
    reverted: bool = False  # the rollout turned back: the desired LRP's definition goes back to from_version


def needs_replacing(rollout: RolloutRecord, row: ActualRecord) -> bool:
    """Whether this index's instance is still to be replaced: it runs another version than the target, or,
    for a restart, it has been running since before the restart began."""
    if rollout.kind == "restart":
        return row.since < rollout.started_at or row.version != rollout.target
    return row.version != rollout.target


def _replaced(rollout: RolloutRecord, actuals: ActualSet, index: int) -> bool:
    """The index is done: its instance runs healthy on the target (no copy of it moving)."""
    g = rollout.process_guid
    row = actuals.get(g, index)
    if row is None or row.state != RUNNING or actuals.other(g, index) is not None:
        return False
    return not needs_replacing(rollout, row)


def count_done(rollout: RolloutRecord, actuals: ActualSet, instances: int) -> int:
    return sum(1 for index in range(instances) if _replaced(rollout, actuals, index))


def _flight_failure(
    rollout: RolloutRecord, actuals: ActualSet, index: int, flight: Flight, now: float, start_timeout: float
) -> str | None:
    g = rollout.process_guid
    new = actuals.get(g, index)
    if new is not None and new.placement_error and not _retry(rollout, new.placement_error):
        return f"instance {index} of version {rollout.target} cannot be placed: {new.placement_error}"
    if now - flight.started_at > start_timeout:
        return (f"instance {index} of version {rollout.target} did not become healthy within "
                f"{start_timeout:g}s")
    return None


def _retry(rollout: RolloutRecord, placement_error: str) -> bool:
    return SAME_INDEX in placement_error and rollout.retried < RETRIES


def step(
    rollout: RolloutRecord, instances: int, actuals: ActualSet, now: float, start_timeout: float
) -> Step:
    """Advance `rollout` (changed in place) over the actual LRPs of its app (`actuals`, changed in place by
    the moves started or abandoned): see the module's docstring."""
    out = Step()
    g = rollout.process_guid
    rollout.total = instances
    if not rollout.active:
        return out
    # The moves in flight: ended, failed, or still going.
    for index, flight in sorted(rollout.in_flight.items()):
        outcome = move_outcome(actuals, g, index, flight.crash_count)
        if outcome in ("completed", "lost"):
            del rollout.in_flight[index]
        elif outcome == "failed":
            new = actuals.get(g, index)
            why = new.crash_reason if new is not None and new.crash_reason else "it exited"
            out.failure = out.failure or f"instance {index} of version {rollout.target} crashed: {why}"
        elif index >= instances:
            del rollout.in_flight[index]  # scaled away: the resize stops both
        elif (new := actuals.get(g, index)) is not None and new.placement_error and _retry(
                rollout, new.placement_error):
            out.stops.extend(abandon_move(actuals, g, index))
            del rollout.in_flight[index]
            rollout.retried += 1
        elif (failure := _flight_failure(rollout, actuals, index, flight, now, start_timeout)) is not None:
            out.failure = out.failure or failure
    if out.failure is not None and rollout.state == PAUSED:
        # A move that went on through a pause failed: dropped, the rollout stays paused with the reason.
        for index in sorted(rollout.in_flight):
            out.stops.extend(abandon_move(actuals, g, index))
        rollout.in_flight.clear()
        rollout.reason = out.failure
    elif out.failure is not None and rollout.state in MOVING:
        _fail(rollout, actuals, out, now)
        if rollout.state != ROLLING_BACK:
            rollout.done = count_done(rollout, actuals, instances)
            return out
    if rollout.state in MOVING:
        _start_moves(rollout, instances, actuals, now, out)
    rollout.done = count_done(rollout, actuals, instances)
    if rollout.state in MOVING and not rollout.in_flight and rollout.done >= instances:
        rollout.state = ROLLED_BACK if rollout.state == ROLLING_BACK else COMPLETED
        rollout.finished_at = now
    elif (rollout.state == RUNNING_STATE and rollout.canary and not rollout.canary_passed
          and not rollout.in_flight and rollout.done >= 1 and rollout.done < instances):
        rollout.state, rollout.reason, rollout.paused_from = PAUSED, CANARY_REASON, RUNNING_STATE
    rollout.updated_at = now
    return out


def _fail(rollout: RolloutRecord, actuals: ActualSet, out: Step, now: float) -> None:
    """Abandon every move in flight (the old instances kept), then roll back, pause, or fail."""
    for index in sorted(rollout.in_flight):
        out.stops.extend(abandon_move(actuals, rollout.process_guid, index))
    rollout.in_flight.clear()
    rollout.reason = out.failure
    rollout.updated_at = now
    if rollout.state == ROLLING_BACK:
        rollout.state, rollout.finished_at = FAILED, now
    elif rollout.auto_revert and rollout.kind == "update" and rollout.from_version != rollout.to_version:
        rollout.state, out.reverted = ROLLING_BACK, True
    else:
        rollout.state, rollout.paused_from = PAUSED, RUNNING_STATE


def _start_moves(rollout: RolloutRecord, instances: int, actuals: ActualSet, now: float, out: Step) -> None:
    g = rollout.process_guid
    # Indices moving for another reason (an evacuation, a rebalancing, a superseded rollout) count too.
    busy = set(rollout.in_flight)
    for index in range(instances):
        if actuals.other(g, index) is not None:
            busy.add(index)
    room = rollout.max_in_flight - len(busy)
    if rollout.canary and not rollout.canary_passed and rollout.state == RUNNING_STATE:
        room = min(room, 1 - len(busy)) if count_done(rollout, actuals, instances) == 0 else 0
    for index in range(instances):
        if room <= 0:
            break
        if index in busy:
            continue
        row = actuals.get(g, index)
        if row is None or row.state != RUNNING or not needs_replacing(rollout, row):
            continue  # not running: convergence starts it anew, on the current definition
        if start_move(actuals, g, index, row.cell_id, now):
            rollout.in_flight[index] = Flight(now, row.crash_count)
            out.starts.add(index)
            room -= 1
