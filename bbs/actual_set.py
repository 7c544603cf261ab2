"""A working copy of some actual LRP rows: decisions edit it, then `diff()` says what to write.

Decisions change instances one at a time (claim, crash, mark suspect, promote back ...); the store
applies the net result in three bulk statements — deletes, updates, inserts — and every net change
becomes one event. Keys are (process_guid, index, presence), so a presence change is a delete plus
an insert of the other key, which the diff turns into whatever rows really changed.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .records import ORDINARY, ActualKey, ActualRecord, actual_key

_presence = operator.attrgetter("presence")


@dataclass(slots=True)
class ActualChanges:
    deletes: list[ActualRecord] = field(default_factory=list)  # as they were
    updates: list[ActualRecord] = field(default_factory=list)  # as they are now (same key)
    inserts: list[ActualRecord] = field(default_factory=list)
    # The updates a client can see (a new modification tag), not only internal bookkeeping.
    visible_updates: list[ActualRecord] = field(default_factory=list)
    # What the updated rows were: lets the store write only the columns that changed.
    previous: dict[ActualKey, ActualRecord] = field(default_factory=dict)
    # For updated rows whose decisions said which fields they set: those fields (every changed one is
    # among them), so the store writes them without comparing the row with what it was.
    declared: dict[ActualKey, frozenset[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.deletes or self.updates or self.inserts)

    def extend(self, other: ActualChanges) -> None:
        self.deletes.extend(other.deletes)
        self.updates.extend(other.updates)
        self.inserts.extend(other.inserts)
        self.visible_updates.extend(other.visible_updates)
        self.previous.update(other.previous)
        self.declared.update(other.declared)


class ActualSet:
    def __init__(self, rows: Iterable[ActualRecord] = ()) -> None:
        rows = list(rows)
        self._original: dict[ActualKey, ActualRecord] = dict(zip(map(actual_key, rows), rows, strict=True))
        self._current: dict[ActualKey, ActualRecord] = dict(self._original)
        # (process_guid, index) -> presence -> row, built once a row is not ORDINARY: until then (nearly
        # always: no evacuation, no suspect cell) a key lookup in `_current` answers, and a lifecycle round
        # of 10,000 instances builds no dict per instance.
        self._by_index: dict[tuple[str, int], dict[str, ActualRecord]] | None = None
        if not set(map(_presence, rows)) <= {ORDINARY}:
            self._index()
        # Keys changed only by `replace` calls that said which fields they set: the union of those fields;
        # and the keys changed otherwise at least once (compared by the store).
        self._declared: dict[ActualKey, frozenset[str]] = {}
        self._undeclared: set[ActualKey] = set()

    def _index(self) -> dict[tuple[str, int], dict[str, ActualRecord]]:
        by_index: dict[tuple[str, int], dict[str, ActualRecord]] = {}
        for row in self._current.values():
            slot = by_index.get((row.process_guid, row.index))
            if slot is None:
                by_index[(row.process_guid, row.index)] = {row.presence: row}
            else:
                slot[row.presence] = row
        self._by_index = by_index
        return by_index

    def get(self, process_guid: str, index: int, presence: str = ORDINARY) -> ActualRecord | None:
        if self._by_index is None:
            return self._current.get((process_guid, index, presence))
        return self._by_index.get((process_guid, index), {}).get(presence)

    def at_index(self, process_guid: str, index: int) -> list[ActualRecord]:
        """Every presence of one instance index (at most one ORDINARY and one other)."""
        if self._by_index is None:
            row = self._current.get((process_guid, index, ORDINARY))
            return [] if row is None else [row]
        return list(self._by_index.get((process_guid, index), {}).values())

    def other(self, process_guid: str, index: int) -> ActualRecord | None:
        """The EVACUATING or SUSPECT record of this index, if any."""
        if self._by_index is None:
            return None
        for presence, row in self._by_index.get((process_guid, index), {}).items():
            if presence != ORDINARY:
                return row
        return None

    def put(self, row: ActualRecord) -> None:
        key = row.key
        self._undeclare(key)
        self._put(key, row)

    def remove(self, row: ActualRecord) -> None:
        key = row.key
        self._undeclare(key)
        self._remove(key, row)

    def replace(self, old: ActualRecord, new: ActualRecord, fields: frozenset[str] | None = None) -> None:
        """Swap a record for its new version (which may have another presence). `fields`: every field
        in which `new` may differ from `old` (the store then need not compare them: a lifecycle round
        updates 10,000 rows)."""
        key = new.key
        if fields is None or key != old.key or key in self._undeclared:
            self.remove(old)
            self.put(new)
            return
        self._remove(key, old)
        self._put(key, new)
        before = self._declared.get(key)
        self._declared[key] = fields if before is None else before | fields

    def _undeclare(self, key: ActualKey) -> None:
        self._declared.pop(key, None)
        self._undeclared.add(key)

    def _put(self, key: ActualKey, row: ActualRecord) -> None:
        by_index = self._by_index
        if by_index is None and row.presence != ORDINARY:
            by_index = self._index()
        self._current[key] = row
        if by_index is not None:
            by_index.setdefault((row.process_guid, row.index), {})[row.presence] = row

    def _remove(self, key: ActualKey, row: ActualRecord) -> None:
        self._current.pop(key, None)
        if self._by_index is None:
            return
        slot = self._by_index.get((row.process_guid, row.index))
        if slot is not None:
            slot.pop(row.presence, None)
            if not slot:
                del self._by_index[(row.process_guid, row.index)]

    def __iter__(self) -> Iterator[ActualRecord]:
        return iter(list(self._current.values()))

    def indices(self) -> Iterable[tuple[str, int]]:
        if self._by_index is None:
            return [(process_guid, index) for process_guid, index, _ in self._current]
        return list(self._by_index)

    def diff(self) -> ActualChanges:
        changes = ActualChanges()
        declared = self._declared
        for key, row in self._original.items():
            now = self._current.get(key)
            if now is None:
                changes.deletes.append(row)
            elif now is not row:
                changes.updates.append(now)
                changes.previous[key] = row
                if key in declared:
                    changes.declared[key] = declared[key]
                if (now.mod_epoch, now.mod_index) != (row.mod_epoch, row.mod_index):
                    changes.visible_updates.append(now)
        for key, row in self._current.items():
            if key not in self._original:
                changes.inserts.append(row)
        return changes
