"""The `objective` strategy: each LRP brings an objective function; the feasible cell valuing it highest wins.

`Ask.objective` is an expression of the objective language (common/objective) or a preset
name; without one, the `diego-blog` preset. Every cell that passes the whole filter chain is valued and
the highest value wins, ties going to the first cell in input order. There is no zone ordering: the
function spreads over zones itself (`r.AvailZoneNumber`, `azs`).

What the picker feeds the function:
- `ai.TotalInstances` is `LRPStart.total_instances` when set, else the process's instances in this batch
  (`state.batch_instances`, filled by the scheduler) plus those on cells when the auction began; counted
  once per process.
- `r.Available*` is what the cell has left after this auction's earlier reservations, before this one;
  `r.RunningAppIDs` holds one AppID per instance on the cell (`slot.proc_counts`, so earlier placements of
  this batch count; instances in delayed shutdown do not).
- Tasks are valued with the default preset as instance 0 of an app whose AppID comes from the task guid
  and whose TotalInstances is 1; a task has no source blob.
- An objective that does not parse fails its LRP with the parse error (boundaries should have refused
  it already with `validate_objective`); the rest of the batch is placed as usual.

REFERENCE walks the tree for each feasible cell, as written. FAST compiles each distinct objective once
into numpy operations over columns of every cell (the auction's columns), asks the filters for the
feasible cells in their vectorised form, and takes the first maximum; both give bit-identical values
(see objective/vectorized.py).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from common.objective import Objective, ObjectiveError, compile_objective

from ..diagnosis import failure_for
from ..filters import Work
from ..objective.evaluate import InstanceFacts, as_number, score
from ..objective.vectorized import BidColumns, Needle, compile_columns
from ..slot import CellSlot
from ..state import AuctionState, app_id
from ..types import Failure
from ..work import LRPStart, TaskStart
from .base import FastPicker, Picker

NAME = "objective"


class ObjectivePicker(Picker):
    """What both engines share: objectives parsed once per auction, and the instance's facts."""

    name = NAME

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.azs = float(len(state.zone_names))
        self.zone_numbers = {zone: float(i + 1) for i, zone in enumerate(state.zone_names)}
        self.objectives: dict[str | None, Objective | ObjectiveError] = {}
        self.app_ids: dict[str, float] = {}
        self.totals: dict[str, float] = {}

    # --- the objective and the instance ---------------------------------------------------------------

    def objective_for(self, text: str | None) -> Objective | ObjectiveError:
        found = self.objectives.get(text)
        if found is None:
            try:
                found = compile_objective(text)
            except ObjectiveError as exc:
                found = exc
            self.objectives[text] = found
        return found

    def app_id(self, guid: str) -> float:
        found = self.app_ids.get(guid)
        if found is None:
            found = self.app_ids[guid] = as_number(app_id(guid))
        return found

    def total_instances(self, item: LRPStart) -> float:
        if item.total_instances > 0:
            return float(item.total_instances)
        pg = item.process_guid
        total = self.totals.get(pg)
        if total is None:
            on_cells_now = sum(self.state.holding(pg).values())
            at_start = on_cells_now - self.state.lrps_placed_by_process.get(pg, 0)
            in_batch = self.state.batch_instances.get(pg, 1)  # 1: the item itself, if no scheduler said
            total = self.totals[pg] = float(at_start + in_batch)
        return total

    def lrp_facts(self, item: LRPStart) -> InstanceFacts:
        return InstanceFacts(
            instance_number=float(item.index), app_id=self.app_id(item.process_guid),
            total_instances=self.total_instances(item), memory_mb=float(item.ask.memory_mb),
            disk_mb=float(item.ask.disk_mb), source_blob=item.ask.source_blob, stack=item.ask.stack,
        )

    def task_facts(self, item: TaskStart) -> InstanceFacts:
        return InstanceFacts(
            instance_number=0.0, app_id=self.app_id(item.task_guid), total_instances=1.0,
            memory_mb=float(item.ask.memory_mb), disk_mb=float(item.ask.disk_mb), source_blob=None,
            stack=item.ask.stack,
        )

    # --- picking --------------------------------------------------------------------------------------

    def pick_lrp(self, item: LRPStart) -> CellSlot | None:
        objective = self.objective_for(item.ask.objective)
        if isinstance(objective, ObjectiveError):
            return None
        return self.best(objective, self.lrp_facts(item), item)

    def pick_task(self, item: TaskStart) -> CellSlot | None:
        objective = self.objective_for(None)
        assert isinstance(objective, Objective)  # the default preset always parses
        return self.best(objective, self.task_facts(item), item)

    def best(self, objective: Objective, ai: InstanceFacts, item: Work) -> CellSlot | None:
        raise NotImplementedError  # pragma: no cover - interface

    def diagnose(self, item: Work) -> Failure:
        if isinstance(item, LRPStart):
            objective = self.objective_for(item.ask.objective)
            if isinstance(objective, ObjectiveError):
                return failure_for(
                    item, str(objective), "the objective was refused before any cell was valued"
                )
        return super().diagnose(item)


# --- the reference engine ---------------------------------------------------------------------------------


class SlotBid:
    """`r` read straight off a cell slot, as the scalar evaluator wants it."""

    __slots__ = ("slot", "zone_number", "app_id")

    def __init__(self, slot: CellSlot, zone_number: float, app_id: Callable[[str], float]) -> None:
        self.slot = slot
        self.zone_number = zone_number
        self.app_id = app_id

    @property
    def available_memory_mb(self) -> float:
        return float(self.slot.avail_m)

    @property
    def available_disk_mb(self) -> float:
        return float(self.slot.avail_d)

    @property
    def total_memory_mb(self) -> float:
        return float(self.slot.total_m)

    @property
    def total_disk_mb(self) -> float:
        return float(self.slot.total_d)

    @property
    def running_app_ids(self) -> list[float]:
        return [self.app_id(pg) for pg, n in self.slot.proc_counts.items() for _ in range(n)]

    @property
    def cached_blobs(self) -> frozenset[str]:
        return self.slot.cell.cached_blobs

    @property
    def stacks(self) -> frozenset[str]:
        return self.slot.stacks


class ObjectiveReference(ObjectivePicker):
    """Every feasible cell valued by walking the tree, in input order; a strictly higher value replaces."""

    def best(self, objective: Objective, ai: InstanceFacts, item: Work) -> CellSlot | None:
        best: CellSlot | None = None
        best_value = 0.0
        for slot in self.feasible_slots(item):
            value = score(objective, ai, SlotBid(slot, self.zone_numbers[slot.zone], self.app_id), self.azs)
            if best is None or value > best_value:
                best, best_value = slot, value
        return best


# --- the fast engine --------------------------------------------------------------------------------------


class ObjectiveColumns:
    """`r` for every cell of the auction, as the compiled objective reads it: the auction's columns
    (free memory and disk as float64, as the scalar evaluator reads them) and the totals and zones.

    `count(x, r.RunningAppIDs)` is rebuilt per call from `state.holding` (process -> {cell: instances},
    always current and sparse) for the processes whose AppID is x; a reservation only has to register a
    process guid it has not seen before.
    """

    def __init__(self, state: AuctionState, zone_numbers: dict[str, float],
                 app_id: Callable[[str], float]) -> None:
        self.slots = state.slots
        self.size = len(self.slots)
        self.app_id = app_id
        self.holding = state.holding
        self.cells = state.columns
        self.columns = {
            "TotalMemoryMB": np.array([s.total_m for s in self.slots], dtype=np.float64),
            "TotalDiskMB": np.array([s.total_d for s in self.slots], dtype=np.float64),
            "AvailZoneNumber": np.array([zone_numbers[s.zone] for s in self.slots], dtype=np.float64),
        }
        self.processes_by_app: dict[float, list[str]] = {}
        self.known_processes: set[str] = set()
        for pg in state.processes():
            self.register(pg)
        self.members: dict[tuple[str, Needle], np.ndarray] = {}  # (list, string) -> 0/1 per cell

    def register(self, pg: str) -> None:
        self.known_processes.add(pg)
        self.processes_by_app.setdefault(self.app_id(pg), []).append(pg)

    def reserved(self, slot: CellSlot) -> None:
        for pg in slot.proc_counts:
            if pg not in self.known_processes:
                self.register(pg)

    def column(self, name: str) -> np.ndarray:
        if name == "AvailableMemoryMB":
            return self.cells.avail_m.astype(np.float64)
        if name == "AvailableDiskMB":
            return self.cells.avail_d.astype(np.float64)
        return self.columns[name]

    def count(self, name: str, needle: Needle) -> np.ndarray:
        if name == "RunningAppIDs":
            if isinstance(needle, np.ndarray):  # a needle that differs per cell: cell by cell
                return np.array(
                    [self.running_on(slot, x) for slot, x in zip(self.slots, needle.tolist(), strict=True)],
                    dtype=np.float64,
                )
            # an AppID is a float: another needle (a string, none) is no AppID and counts nothing
            return self.running_count(needle) if isinstance(needle, float | int) else np.zeros(self.size)
        return self.membership(name, needle)

    def running_on(self, slot: CellSlot, x: float) -> float:
        return float(sum(n for pg, n in slot.proc_counts.items() if self.app_id(pg) == x))

    def running_count(self, x: float) -> np.ndarray:
        counts = np.zeros(self.size, dtype=np.float64)
        for pg in self.processes_by_app.get(x, ()):  # NaN finds nothing, as NaN equals nothing
            cells = self.holding(pg)
            if cells:
                positions = np.fromiter(cells.keys(), dtype=np.intp, count=len(cells))
                counts[positions] += np.fromiter(cells.values(), dtype=np.float64, count=len(cells))
        return counts

    def membership(self, name: str, needle: Needle) -> np.ndarray:
        if needle is None:
            return np.zeros(self.size, dtype=np.float64)
        key = (name, needle)
        found = self.members.get(key)
        if found is None:
            if name == "CachedBlobIDs":
                found = np.array([needle in s.cell.cached_blobs for s in self.slots], dtype=np.float64)
            else:  # "Stack"
                found = np.array([needle in s.stacks for s in self.slots], dtype=np.float64)
            self.members[key] = found
        return found


class ObjectiveFast(ObjectivePicker, FastPicker):
    """Whole-auction numpy evaluation: one vector of values and one feasibility mask per item."""

    def __init__(self, state: AuctionState) -> None:
        super().__init__(state)
        self.bids = ObjectiveColumns(state, self.zone_numbers, self.app_id)
        state.on_reserve(self.bids.reserved)
        self.compiled: dict[str, Callable[[InstanceFacts, BidColumns, float], np.ndarray]] = {}

    def best(self, objective: Objective, ai: InstanceFacts, item: Work) -> CellSlot | None:
        positions = self.feasible_positions(item)
        if positions.size == 0:
            return None
        values = self.compiled_for(objective)(ai, self.bids, self.azs)
        return self.state.slots[int(positions[int(np.argmax(values[positions]))])]  # argmax: first maximum

    def compiled_for(self, objective: Objective) -> Callable[[InstanceFacts, BidColumns, float], np.ndarray]:
        found = self.compiled.get(objective.text)
        if found is None:
            found = self.compiled[objective.text] = compile_columns(objective)
        return found


FAST = ObjectiveFast
REFERENCE = ObjectiveReference
