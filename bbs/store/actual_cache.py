"""A BBS's in-memory copy of the actual_lrps table, valid while nobody else wrote it.

At Diego's scale (250,000 actual LRPs) reading the table costs seconds: a convergence pass read all
of it, and every lifecycle round read thousands of rows back that this same process had just
written. The copy lets both read memory instead.

Validity rests on one number: `generations.actual_lrps` in the database, which every write
transaction that changes actual LRPs raises by one while it holds the write lock (Store.write). The
copy remembers the number it reflects:

- a transaction that finds the stored number equal to the copy's reads actual LRPs from the copy, and
  after its commit the copy takes its changes and the new number;
- a transaction that finds another number (another BBS replica wrote, or the copy was never loaded)
  reads the database as before, and leaves the copy alone; the next full read (a convergence pass)
  reloads it.

A full read takes long enough at scale that this process commits more writes meanwhile, and the
snapshot it read is behind when it arrives. So while the copy is out of date, committed changes go
to a journal (with the generation they started from), and a load replays the journal entries that
follow its snapshot without a gap. A gap means another replica wrote: the copy then stays at the last
generation it can vouch for.

So with one BBS, or with the replica that does the writing, the copy is always used; with replicas
that all write, it is reloaded by convergence passes and otherwise bypassed, never wrong.

Records are never changed in place (decisions make copies: records.changed), so the copy hands out
its own records without copying them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..records import EVACUATING, ORDINARY, SUSPECT, ActualKey, ActualRecord

PRESENCES = (ORDINARY, EVACUATING, SUSPECT)
JOURNAL_RECORDS = 300_000  # records remembered while the copy is out of date, at most

# What a committed transaction did to actual LRPs, in order: ("delete", keys), ("put", records),
# ("delete-guid", process_guid).
CacheOp = tuple[str, Any]


class ActualCache:
    def __init__(self) -> None:
        self.generation: int | None = None  # the stored generation the rows reflect; None: not loaded
        self._rows: dict[ActualKey, ActualRecord] = {}
        self._by_guid: dict[str, dict[ActualKey, ActualRecord]] = {}
        self._counts: dict[tuple[str, str], int] = {}  # (state, presence) -> rows
        # (generation before, changes) of transactions committed while the copy was out of date.
        self._journal: list[tuple[int, Sequence[CacheOp]]] = []
        self._journal_records = 0
        self.wanted = False  # a full read asked for the copy: from then on keep a journal when behind

    def valid_at(self, generation: int) -> bool:
        return self.generation is not None and self.generation == generation

    def load(self, generation: int, rows: Iterable[ActualRecord]) -> None:
        """Replace the copy by `rows`, read at `generation`, then replay the journal from there. A read
        no newer than the copy is ignored (a writer brought the copy as far while the read ran)."""
        if self.generation is not None and generation <= self.generation:
            return
        self._rows = {}
        self._by_guid = {}
        self._counts = {}
        self.put(rows)
        for before, ops in self._journal:
            if before < generation:
                continue  # in the snapshot already
            if before != generation:
                break  # a generation this process did not write: stop where the copy is still right
            self.apply(ops)
            generation += 1
        self._clear_journal()
        self.generation = generation

    def invalidate(self) -> None:
        self.generation = None
        self._rows, self._by_guid, self._counts = {}, {}, {}
        self._clear_journal()

    def committed(self, before: int, ops: Sequence[CacheOp]) -> None:
        """A transaction that started at generation `before` committed `ops` (and `before` + 1)."""
        if self.valid_at(before):
            self.apply(ops)
            self.generation = before + 1
        elif self.wanted:
            self._journal.append((before, ops))
            self._journal_records += sum(len(what) if isinstance(what, list) else 1 for _, what in ops)
            if self._journal_records > JOURNAL_RECORDS:
                self._clear_journal()  # too far behind to catch up: the next load starts afresh

    def _clear_journal(self) -> None:
        self._journal = []
        self._journal_records = 0

    def apply(self, ops: Iterable[CacheOp]) -> None:
        for kind, what in ops:
            if kind == "delete":
                self.remove(what)
            elif kind == "put":
                self.put(what)
            else:
                self.remove_guid(what)

    # --- a committed transaction's changes (then the caller sets `generation`) ---------------------

    def remove(self, keys: Iterable[ActualKey]) -> None:
        for key in keys:
            self._remove(key)

    def remove_guid(self, process_guid: str) -> None:
        self.remove(list(self._by_guid.get(process_guid, {})))

    # --- reads -------------------------------------------------------------------------------------

    def all(self) -> list[ActualRecord]:
        return list(self._rows.values())

    def of_guids(self, process_guids: Iterable[str]) -> list[ActualRecord]:
        found: list[ActualRecord] = []
        for process_guid in process_guids:
            found.extend(self._by_guid.get(process_guid, {}).values())
        return found

    def for_keys(self, keys: Iterable[tuple[str, int]]) -> list[ActualRecord]:
        """Every presence of each (process_guid, index)."""
        rows = self._rows
        if not any(n for (_, presence), n in self._counts.items() if presence != ORDINARY):
            # Usually every instance is ORDINARY (no evacuation, no suspect cell): one lookup per key.
            return [
                row for row in map(rows.get, [(pg, index, ORDINARY) for pg, index in keys]) if row is not None
            ]
        found: list[ActualRecord] = []
        for process_guid, index in keys:
            for presence in PRESENCES:
                row = rows.get((process_guid, index, presence))
                if row is not None:
                    found.append(row)
        return found

    def counts(self, process_guid: str | None = None) -> list[tuple[str, str, int]]:
        """(state, presence, count) for every combination present, like Tx.count_actuals."""
        if process_guid is None:
            return [(state, presence, n) for (state, presence), n in self._counts.items() if n]
        counts: dict[tuple[str, str], int] = {}
        for row in self._by_guid.get(process_guid, {}).values():
            counts[(row.state, row.presence)] = counts.get((row.state, row.presence), 0) + 1
        return [(state, presence, n) for (state, presence), n in counts.items()]

    def __len__(self) -> int:
        return len(self._rows)

    # --- upkeep ------------------------------------------------------------------------------------

    def put(self, rows: Iterable[ActualRecord]) -> None:
        """Rows updated or inserted."""
        by_guid, counts = self._by_guid, self._counts
        for row in rows:
            key = (row.process_guid, row.index, row.presence)
            old = self._rows.get(key)
            if old is not None:
                counts[(old.state, old.presence)] -= 1
            self._rows[key] = row
            group = by_guid.get(row.process_guid)
            if group is None:
                group = by_guid[row.process_guid] = {}
            group[key] = row
            count_key = (row.state, row.presence)
            counts[count_key] = counts.get(count_key, 0) + 1

    def _remove(self, key: ActualKey) -> None:
        old = self._rows.pop(key, None)
        if old is None:
            return
        self._counts[(old.state, old.presence)] -= 1
        group = self._by_guid.get(key[0])
        if group is not None:
            group.pop(key, None)
            if not group:
                del self._by_guid[key[0]]
