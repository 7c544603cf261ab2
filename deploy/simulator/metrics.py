"""What a simulator run ended with, whatever the transport, and the numbers it is judged by.

A run's `Outcome` is the cluster as it stands afterwards (every instance on every cell, what was there
before included) plus what happened to the new work (placed with its wait, or failed with Diego's
error), the time, the auctions and the requests. `summarise` turns it into the numbers of the terminal
summary and of report.json:

- `cv_memory`: population standard deviation / mean of the memory allocated per cell
(docs/workload-format.md).
- AZ skew of an app: max - min of its instances per zone, over the zones that have a cell it may run on
  (stack and placement tags; empty zones count as 0). An app of 2 instances in 3 zones has skew 1 at best.
- instances per cell (min / max), prefill included, as `per_cell_instances` in the workload contract.
- wait: seconds from submitting the work to the instance being placed (inproc: to its rep taking the work;
  http/nats: to the BBS recording it RUNNING, the simulated start taking no time).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .engine import population_cv
from .sim_input import SimInput

WAIT_BINS = 30


@dataclass(slots=True)
class Outcome:
    strategy: str
    transport: str
    # (process_guid, index, cell_id, memory_mb): every LRP instance on a cell at the end, prefill included
    instances: list[tuple[str, int, str, int]] = field(default_factory=list)
    prefill_keys: set[tuple[str, int]] = field(default_factory=set)  # which of them were there before
    tasks: list[tuple[str, str, int]] = field(default_factory=list)  # (task_guid, cell_id, memory_mb) placed
    waits: list[float] = field(default_factory=list)  # one per placed new LRP instance or task, seconds
    failures: list[dict[str, Any]] = field(
        default_factory=list
    )  # {process_guid, index | task_guid, error, detail}
    seconds: float = 0.0
    rounds: int = 0  # auctions
    communications: dict[str, int] = field(
        default_factory=dict
    )  # by kind: bbs, rep_state, rep_work, nats ...
    notes: list[str] = field(default_factory=list)

    @property
    def placed(self) -> int:
        return len(self.waits)


def compatible(cell_stacks: Sequence[str], cell_tags: Sequence[str], cell_optional: Sequence[str],
               stack: str, tags: Sequence[str]) -> bool:
    """Diego's compatibility: the stack, request tags ⊆ cell tags ∪ optional, cell tags ⊆ request tags."""
    wanted = set(tags)
    required = set(cell_tags)
    return stack in cell_stacks and required <= wanted and wanted <= required | set(cell_optional)


def az_skews(sim: SimInput, outcome: Outcome) -> dict[str, int]:
    """Per app of the new work (with an instance placed): max - min instances over its eligible zones."""
    zone_of = {c.id: c.zone for c in sim.cells}
    per_app: dict[str, Counter[str]] = defaultdict(Counter)
    for guid, _index, cell_id, _memory in outcome.instances:
        per_app[guid][zone_of[cell_id]] += 1
    eligible_cache: dict[tuple[str, tuple[str, ...]], set[str]] = {}
    skews: dict[str, int] = {}
    for a in sim.apps:
        if a.process_guid in skews or a.process_guid not in per_app:
            continue
        key = (a.stack, a.placement_tags)
        zones = eligible_cache.get(key)
        if zones is None:
            zones = eligible_cache[key] = {
                c.zone for c in sim.cells
                if compatible(c.all_stacks, c.placement_tags, c.optional_placement_tags, *key)}
        counts = per_app[a.process_guid]
        values = [counts.get(z, 0) for z in zones | set(counts)]
        skews[a.process_guid] = max(values) - min(values)
    return skews


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on an already sorted list."""
    if not sorted_values:
        return 0.0
    pos = (len(sorted_values) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def wait_summary(waits: Sequence[float], bins: int = WAIT_BINS) -> dict[str, Any]:
    ordered = sorted(waits)
    if not ordered:
        return {"min": 0.0, "mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0.0,
                "histogram": {"edges": [], "counts": []}}
    low, high = ordered[0], ordered[-1]
    if high > low:
        width = (high - low) / bins
        counts = [0] * bins
        for w in ordered:  # the epsilon keeps a value on an edge (up to rounding) in the bin it starts
            counts[min(int((w - low) / width + 1e-9), bins - 1)] += 1
        edges = [round(low + i * width, 9) for i in range(bins + 1)]
    else:  # every wait the same: one narrow bin around it
        half = max(abs(low) * 0.05, 1e-6)
        counts, edges = [len(ordered)], [round(low - half, 9), round(low + half, 9)]
    return {
        "min": round(ordered[0], 6), "mean": round(sum(ordered) / len(ordered), 6),
        "p50": round(percentile(ordered, 0.5), 6), "p95": round(percentile(ordered, 0.95), 6),
        "max": round(ordered[-1], 6), "histogram": {"edges": edges, "counts": counts},
    }


def summarise(sim: SimInput, outcome: Outcome) -> dict[str, Any]:
    """The numbers of one strategy's run (report.json's `strategies[]` entries)."""
    cells = {c.id: c for c in sim.cells}
    instances = dict.fromkeys(cells, 0)
    allocated = dict.fromkeys(cells, 0)
    prefill_mb = dict.fromkeys(cells, 0)
    for guid, index, cell_id, memory in outcome.instances:
        instances[cell_id] += 1
        allocated[cell_id] += memory
        if (guid, index) in outcome.prefill_keys:
            prefill_mb[cell_id] += memory
    for _guid, cell_id, memory in outcome.tasks:
        allocated[cell_id] += memory
    for c in sim.cells:  # prefill tasks hold memory too (the inproc reps and the engine count them)
        allocated[c.id] += sum(t.memory_mb for t in c.prefill_tasks)
        prefill_mb[c.id] += sum(t.memory_mb for t in c.prefill_tasks)
    per_zone: Counter[str] = Counter()
    for cell_id, n in instances.items():
        per_zone[cells[cell_id].zone] += n

    skews = az_skews(sim, outcome)
    worst_app = max(skews, key=lambda g: (skews[g], g)) if skews else None
    counts = list(instances.values())
    zone_split: dict[str, Counter[str]] = defaultdict(Counter)
    new_guids = {a.process_guid for a in sim.apps}
    for guid, _index, cell_id, _memory in outcome.instances:
        if guid in new_guids:
            zone_split[guid][cells[cell_id].zone] += 1
    communications = sum(outcome.communications.values())
    total = outcome.placed + len(outcome.failures)
    return {
        "strategy": outcome.strategy,
        "transport": outcome.transport,
        "placed": outcome.placed,
        "failed": len(outcome.failures),
        "seconds": round(outcome.seconds, 6),
        "placements_per_s": round(outcome.placed / outcome.seconds, 1) if outcome.seconds > 0 else 0.0,
        "rounds": outcome.rounds,
        "communications": communications,
        "communications_by_kind": dict(outcome.communications),
        "communications_per_instance": round(communications / total, 4) if total else 0.0,
        "cv_memory": round(population_cv([float(allocated[c.id]) for c in sim.cells]), 6),
        "worst_az_skew": skews[worst_app] if worst_app is not None else 0,
        "worst_az_skew_app": worst_app,
        "apps_with_az_skew_over_1": sum(1 for s in skews.values() if s > 1),
        "az_skew_histogram": dict(sorted(Counter(skews.values()).items())),
        "min_instances_per_cell": min(counts, default=0),
        "max_instances_per_cell": max(counts, default=0),
        "mean_instances_per_cell": round(sum(counts) / len(counts), 3) if counts else 0.0,
        "wait_s": wait_summary(outcome.waits),
        "per_zone_instances": dict(sorted(per_zone.items())),
        "per_cell": [
            {"cell_id": c.id, "zone": c.zone, "memory_mb": c.memory_mb, "allocated_mb": allocated[c.id],
             "prefill_mb": prefill_mb[c.id], "instances": instances[c.id]}
            for c in sim.cells
        ],
        "app_zone_split": {guid: dict(sorted(z.items())) for guid, z in zone_split.items()},
        "failures_by_error": dict(Counter(f["error"] for f in outcome.failures).most_common()),
        "failures": outcome.failures[:50],
        "notes": list(outcome.notes),
    }
