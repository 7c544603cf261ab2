"""A working copy of some actual LRP rows: decisions edit it, then `diff()` says what to write.

Decisions change instances one at a time (claim, crash, mark suspect, promote back ...); the store
applies the net result in three bulk statements — deletes, updates, inserts — and every net change
becomes one event. Keys are (process_guid, index, presence), so a presence change is a delete plus
an insert of the other key, which the diff turns into whatever rows really changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from .records import ORDINARY, ActualKey, ActualRecord, actual_key


@dataclass(slots=True)
class ActualChanges:
    deletes: list[ActualRecord] = field(default_factory=list)  # as they were
    updates: list[ActualRecord] = field(default_factory=list)  # as they are now (same key)
    inserts: list[ActualRecord] = field(default_factory=list)
    # The updates a client can see (a new modification tag), not only internal bookkeeping.
    visible_updates: list[ActualRecord] = field(default_factory=list)
    # What the updated rows were: lets the store write only the columns that changed.
    previous: dict[ActualKey, ActualRecord] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.deletes or self.updates or self.inserts)

    def extend(self, other: ActualChanges) -> None:
        self.deletes.extend(other.deletes)
        self.updates.extend(other.updates)
        self.inserts.extend(other.inserts)
        self.visible_updates.extend(other.visible_updates)
        self.previous.update(other.previous)


class ActualSet:
    def __init__(self, rows: Iterable[ActualRecord] = ()) -> None:
        rows = list(rows)
        self._original: dict[ActualKey, ActualRecord] = dict(zip(map(actual_key, rows), rows, strict=True))
        self._current: dict[ActualKey, ActualRecord] = dict(self._original)
        by_index: dict[tuple[str, int], dict[str, ActualRecord]] = {}
        for row in self._current.values():
            slot = by_index.get((row.process_guid, row.index))
            if slot is None:
                by_index[(row.process_guid, row.index)] = {row.presence: row}
            else:
                slot[row.presence] = row
        self._by_index = by_index

    def get(self, process_guid: str, index: int, presence: str = ORDINARY) -> ActualRecord | None:
        return self._by_index.get((process_guid, index), {}).get(presence)

    def at_index(self, process_guid: str, index: int) -> list[ActualRecord]:
        """Every presence of one instance index (at most one ORDINARY and one other)."""
        return list(self._by_index.get((process_guid, index), {}).values())

    def other(self, process_guid: str, index: int) -> ActualRecord | None:
        """The EVACUATING or SUSPECT record of this index, if any."""
        for presence, row in self._by_index.get((process_guid, index), {}).items():
            if presence != ORDINARY:
                return row
        return None

    def put(self, row: ActualRecord) -> None:
        self._current[row.key] = row
        self._by_index.setdefault((row.process_guid, row.index), {})[row.presence] = row

    def remove(self, row: ActualRecord) -> None:
        self._current.pop(row.key, None)
        slot = self._by_index.get((row.process_guid, row.index))
        if slot is not None:
            slot.pop(row.presence, None)
            if not slot:
                del self._by_index[(row.process_guid, row.index)]

    def replace(self, old: ActualRecord, new: ActualRecord) -> None:
        """Swap a record for its new version (which may have another presence)."""
        self.remove(old)
        self.put(new)

    def __iter__(self) -> Iterator[ActualRecord]:
        return iter(list(self._current.values()))

    def indices(self) -> Iterable[tuple[str, int]]:
        return list(self._by_index)

    def diff(self) -> ActualChanges:
        changes = ActualChanges()
        for key, row in self._original.items():
            now = self._current.get(key)
            if now is None:
                changes.deletes.append(row)
            elif now is not row:
                changes.updates.append(now)
                changes.previous[key] = row
                if (now.mod_epoch, now.mod_index) != (row.mod_epoch, row.mod_index):
                    changes.visible_updates.append(now)
        for key, row in self._current.items():
            if key not in self._original:
                changes.inserts.append(row)
        return changes
