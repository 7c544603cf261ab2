"""Each app's last events, kept per app in this BBS's memory (GET /v1/desired_lrps/{guid}/events).

The event stream keeps the last 10,000 events of the whole cluster, and builds none while nobody listens
(bbs/events.py): a crash of a quiet app an hour ago is long gone from it. This keeps, for each app, its
last PER_APP story-worthy changes (placed, started, crashed with its reason, restarted, placement failed,
evacuating, stopped, rollouts), read from every committed change whether anyone listens or not. It reads
the rows a transaction changed (old and new) and keeps a small tuple only for the transitions it keeps,
made into the wire's dict when read: a 10,000-instance push pays a few comparisons and a tuple per
changed row (about half what building its events costs), never a `to_wire`.

Kept in memory, not in the store, as placement explanations are (bbs/explanations.py): no write per
change, and a story is what an operator asks about now. A BBS restart, or a request answered by another
replica than the one that committed the change, starts the story afresh (docs/events.md).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import Any

from .actual_set import ActualChanges
from .records import CLAIMED, CRASHED, EVACUATING, ORDINARY, RUNNING, UNCLAIMED, ActualRecord, iso

PER_APP = 50
MAX_APPS = 2_000  # beyond it the least recently changed app's story goes: ~330 B an entry, 33 MB at most

# The kinds of entry, as `kind` in the wire's entries (docs/events.md).
PLACED, STARTED, CRASHED_KIND, RESTARTING, UNPLACEABLE = "placed", "started", "crashed", "restarting", \
    "unplaceable"
# evacuating: an instance's copy keeps serving while a replacement starts elsewhere (a cell draining, a
# rebalancing move, a rollout's make-before-break); evacuated: that old copy removed.
EVACUATING_KIND, EVACUATED, STOPPED, ROLLOUT = "evacuating", "evacuated", "stopped", "rollout"


def actual_entries(changes: ActualChanges) -> list[tuple[str, Kept]]:
    """(process_guid, entry) for each story-worthy change among these rows, in the order the transaction
    made them. Pure: `at` is each row's `since` (when its state changed)."""
    found: list[tuple[str, Kept]] = []
    for row in changes.inserts:
        found.extend((row.process_guid, entry) for entry in _transitions(None, row))
    for row in changes.updates:
        found.extend((row.process_guid, entry) for entry in _transitions(changes.previous.get(row.key), row))
    for row in changes.deletes:
        if row.state in (CLAIMED, RUNNING):
            kind = STOPPED if row.presence == ORDINARY else EVACUATED if row.presence == EVACUATING else ""
            if kind:
                found.append((row.process_guid, _entry(kind, row, None)))
    return found


def _transitions(before: ActualRecord | None, row: ActualRecord) -> list[Kept]:
    was_state = before.state if before is not None else None
    if row.presence == EVACUATING:
        return [_entry(EVACUATING_KIND, row, None)] if before is None or before.presence != EVACUATING else []
    if row.crash_count > (before.crash_count if before is not None else 0):
        # A crash: waiting out its back-off (CRASHED), or restarted at once (UNCLAIMED again, Diego's
        # first immediate_restarts crashes), which is a restart too.
        crashed = _entry(CRASHED_KIND, row, row.crash_reason or None)
        return [crashed] if row.state == CRASHED else [crashed, _entry(RESTARTING, row, None)]
    if row.state == UNCLAIMED and was_state == CRASHED:
        return [_entry(RESTARTING, row, None)]
    if row.state == CLAIMED and (was_state != CLAIMED or before is None or before.cell_id != row.cell_id):
        return [_entry(PLACED, row, None)]
    if row.state == RUNNING and was_state != RUNNING:
        # A claim and its running may come in one lifecycle round: never CLAIMED in the store, still placed.
        placed = was_state != CLAIMED or before is None or before.cell_id != row.cell_id
        started = _entry(STARTED, row, None)
        return [_entry(PLACED, row, None), started] if placed else [started]
    if row.placement_error and (before is None or before.placement_error != row.placement_error):
        return [_entry(UNPLACEABLE, row, row.placement_error)]
    return []


# An instance's entry as kept: (kind, at, index, cell_id, crash_count, reason). A tuple, made into the
# wire's dict only when read: a 10,000-instance push keeps 20,000 of them (placed, started).
Kept = tuple[str, float, int, str, int, str]


def _entry(kind: str, row: ActualRecord, reason: str | None) -> Kept:
    return (kind, row.since, row.index, row.cell_id, row.crash_count, reason or "")


def as_wire(entry: Kept | dict[str, Any]) -> dict[str, Any]:
    """An entry as GET .../events shows it (common/models/app_events.py's AppEvent)."""
    if isinstance(entry, dict):
        return entry
    kind, at, index, cell_id, crash_count, reason = entry
    wire: dict[str, Any] = {"kind": kind, "at": iso(at), "index": index}
    if cell_id:
        wire["cell_id"] = cell_id
    if crash_count:
        wire["crash_count"] = crash_count
    if reason:
        wire["reason"] = reason
    return wire


def rollout_entry(rollout: dict[str, Any], at: float) -> dict[str, Any]:
    """The entry of a rollout's change of state or progress (the Rollout's wire form)."""
    entry: dict[str, Any] = {"kind": ROLLOUT, "at": iso(at), "state": rollout.get("state", "")}
    for key in ("kind", "to_version", "from_version", "done", "total", "reason"):
        if key in rollout and rollout[key] not in (None, ""):
            entry["rollout_kind" if key == "kind" else key] = rollout[key]
    return entry


class AppHistory:
    """The last `per_app` entries of each of at most `max_apps` apps, newest last."""

    def __init__(self, per_app: int = PER_APP, max_apps: int = MAX_APPS) -> None:
        self.per_app = per_app
        self.max_apps = max_apps
        self._apps: OrderedDict[str, deque[Kept | dict[str, Any]]] = OrderedDict()

    def add(self, process_guid: str, entry: Kept | dict[str, Any]) -> None:
        if self.per_app <= 0:
            return
        kept = self._apps.get(process_guid)
        if kept is None:
            kept = self._apps[process_guid] = deque(maxlen=self.per_app)
            while len(self._apps) > self.max_apps:
                self._apps.popitem(last=False)
        else:
            self._apps.move_to_end(process_guid)
        kept.append(entry)

    def record_actuals(self, changes: ActualChanges) -> None:
        for process_guid, entry in actual_entries(changes):
            self.add(process_guid, entry)

    def record_rollout(self, rollout: dict[str, Any], at: float) -> None:
        """A rollout's change; progress within one state updates its entry instead of adding one, so that a
        100-instance rollout is a few entries, not a hundred."""
        entry = rollout_entry(rollout, at)
        kept = self._apps.get(rollout["process_guid"])
        if kept:
            last = kept[-1]
            if isinstance(last, dict) and last["kind"] == ROLLOUT and (
                    (last["state"], last.get("to_version")) == (entry["state"], entry.get("to_version"))):
                kept[-1] = entry
                return
        self.add(rollout["process_guid"], entry)

    def forget(self, process_guid: str) -> None:
        self._apps.pop(process_guid, None)

    def story(self, process_guid: str) -> Sequence[Kept | dict[str, Any]]:
        """An app's entries as kept (not made into dicts), oldest first: for merging (bbs/recent_past.py)."""
        return self._apps.get(process_guid, ())

    def stories(self) -> list[tuple[str, Sequence[Kept | dict[str, Any]]]]:
        """Every app's entries as kept, oldest first."""
        return list(self._apps.items())

    def recent(self, process_guid: str) -> list[dict[str, Any]]:
        return [as_wire(entry) for entry in self._apps.get(process_guid, ())]
