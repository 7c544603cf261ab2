"""The cell-load rule: a cell whose memory fraction is more than `load_tolerance` above the mean of the
cells sheds an instance of the app it holds most of to the best cell (the auction's filter chain and cell
score) that ends up less loaded than the source was, in the same zone when one fits (so the zone spread
holds), else in a zone where the app's spread stays as good. Apps on the loadmark strategy are left to
the load-mark rule (load_mark.py): their cells' load is the load mark."""

from __future__ import annotations

from ..slot import CellSlot
from .load_mark import is_loadmark
from .moves import CELL_LOAD
from .planner import Planner, memory_fraction


def even_load(planner: Planner) -> None:
    slots = [s for s in planner.state.slots if s.total_m > 0]
    if not slots:
        return
    tried: set[str] = set()
    while not planner.full():
        mean = sum(memory_fraction(s) for s in slots) / len(slots)
        hot = [
            s
            for s in slots
            if s.cell_id not in tried and memory_fraction(s) > mean + planner.rebalance.load_tolerance
        ]
        if not hot:
            return
        source = max(hot, key=lambda s: (memory_fraction(s), s.cell_id))
        if not relieve(planner, source):
            tried.add(source.cell_id)


def relieve(planner: Planner, source: CellSlot) -> bool:
    """Move one instance off an overloaded cell to a cell that ends up less loaded than it was."""
    before = memory_fraction(source)
    for pg in planner.apps_on(source, lambda item: not is_loadmark(planner, item)):
        item = planner.requests[pg]
        for zone in planner.zones_keeping_spread(item, source.zone):
            candidates = [
                s
                for s in planner.state.zone_slots[zone]
                if s is not source and 1.0 - (s.avail_m - item.ask.memory_mb) / (s.total_m or 1) < before
            ]
            target = planner.best_target(item, candidates)
            if target is None:
                continue
            index = max(planner.movable[pg][source.cell_id])
            gain = item.ask.memory_mb / (source.total_m or 1)
            planner.move(
                item,
                index,
                source,
                target,
                CELL_LOAD,
                f"{source.cell_id} memory {before:.2f} above the mean",
                gain,
            )
            return True
    return False
