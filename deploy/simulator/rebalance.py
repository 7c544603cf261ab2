"""The `zone-outage-and-return` scenario, on the engine alone: a zone's cells leave, what ran
there is placed on the other zones (the evacuation), the cells return empty, the rebalancer plans
(placement/rebalance/) and its moves are replayed on simulated time under the BBS's budget.

The report: each app's instances per zone before the outage, during it and after the rebalance (and the
worst skew of each), the moves with their reasons, and each app's running count over time (the outage
takes the lost zone's instances away until their replacements run; a move runs the new instance before
the old one stops, so rebalancing never takes an app below its desired count). tests/bench/rebalance.py
runs the same at 1,000 cells.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bbs.rebalance_budget import moves_per_minute
from placement import schedule
from placement.ask import Ask
from placement.cell_offer import CellOffer, HostMetrics, Resources
from placement.rebalance import Move, Placed, plan_moves
from placement.types import SchedulerConfig
from placement.work import LRPStart

Where = dict[tuple[str, int], str]  # (process guid, index) -> cell id


@dataclass(slots=True)
class Budget:
    """The BBS's rebalancing budget (bbs/settings.py defaults) and how long a move takes."""

    in_flight: int = 5
    per_minute: int = 0  # 0: as the BBS scales it with the cells (bbs/rebalance_budget.py)
    move_s: float = 2.0

    def for_cells(self, cells: int) -> Budget:
        """The budget with its per-minute cap as the BBS resolves it for this many cells."""
        return dataclasses.replace(self, per_minute=moves_per_minute(self.per_minute, cells))


@dataclass(slots=True)
class Replay:
    seconds: float = 0.0
    lowest_ratio: float = 1.0  # the lowest running/desired of any app at any moment
    running: dict[str, list[tuple[float, int]]] = field(default_factory=dict)  # app -> (time, running)


def make_cells(
    count: int,
    zones: int,
    memory_mb: int,
    containers: int,
    keep: Iterable[str] | None = None,
    hosts: dict[str, HostMetrics] | None = None,
) -> list[CellOffer]:
    """`count` equal cells round-robin over `zones` (only those of the zones in `keep`), each with its
    host's load from `hosts` (the load-mark strategy's input; none by default)."""
    wanted = None if keep is None else set(keep)
    cells = []
    for i in range(count):
        zone, cell_id = f"z{i % zones}", f"cell-{i:04d}"
        if wanted is None or zone in wanted:
            size = Resources(memory_mb, 4 * memory_mb, containers)
            host = None if hosts is None else hosts.get(cell_id)
            cells.append(CellOffer(cell_id, zone, size, dataclasses.replace(size), host=host))
    return cells


def holding(cells: list[CellOffer], where: Where, requests: dict[str, LRPStart]) -> list[CellOffer]:
    """The cells with these instances on them: their room taken, counted per app."""
    by_id = {c.cell_id: c for c in cells}
    for (pg, _), cell_id in where.items():
        cell, ask = by_id[cell_id], requests[pg].ask
        a = cell.available
        cell.available = Resources(a.memory_mb - ask.memory_mb, a.disk_mb - ask.disk_mb, a.containers - 1)
        cell.lrp_counts[pg] = cell.lrp_counts.get(pg, 0) + 1
    return cells


def spread(where: Where, zone_of: dict[str, str], zones: list[str]) -> dict[str, dict[str, int]]:
    """Each app's instances per zone (every zone named, empty ones 0)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for (pg, _), cell_id in where.items():
        counts[pg][zone_of[cell_id]] += 1
    return {pg: {z: c[z] for z in zones} for pg, c in sorted(counts.items())}


def worst_skew(per_app: dict[str, dict[str, int]]) -> int:
    return max((max(c.values()) - min(c.values()) for c in per_app.values()), default=0)


def replay(moves: list[Move], desired: dict[str, int], budget: Budget, start: float = 0.0) -> Replay:
    """The moves on simulated time under the budget (one per app, `in_flight` at once, `per_minute`
    started per minute); each app's running count at every change."""
    assert budget.per_minute > 0, "a budget resolved for the cluster's cells (Budget.for_cells)"
    out = Replay(seconds=start, running={pg: [] for pg in desired})
    queue, running = deque(moves), dict(desired)
    ends: list[tuple[float, str]] = []  # (when its old instance stops, app)
    busy: set[str] = set()
    starts: deque[float] = deque()
    now = start
    while queue or ends:
        while starts and starts[0] <= now - 60.0:
            starts.popleft()
        waiting: deque[Move] = deque()
        while queue and len(ends) < budget.in_flight and len(starts) < budget.per_minute:
            move = queue.popleft()
            if move.process_guid in busy:
                waiting.append(move)
                continue
            busy.add(move.process_guid)
            starts.append(now)
            heapq.heappush(ends, (now + budget.move_s, move.process_guid))
            running[move.process_guid] += 1  # the new instance runs before the old one stops
            out.running[move.process_guid].append((now, running[move.process_guid]))
        queue.extendleft(reversed(waiting))
        next_start = starts[0] + 60.0 if queue and len(starts) >= budget.per_minute else None
        if ends and (next_start is None or ends[0][0] <= next_start):
            now, pg = heapq.heappop(ends)
            running[pg] -= 1
            busy.discard(pg)
            out.running[pg].append((now, running[pg]))
            out.lowest_ratio = min(out.lowest_ratio, running[pg] / desired[pg])
        elif next_start is not None:
            now = next_start
        else:
            break
    out.seconds = now
    return out


def outage_and_return(
    cells: int,
    zones: int,
    requests: dict[str, LRPStart],
    memory_mb: int,
    containers: int,
    budget: Budget,
    config: SchedulerConfig | None = None,
    hosts: dict[str, HostMetrics] | None = None,
) -> dict[str, Any]:
    """Place every app (each by its own strategy), lose the first zone, evacuate, return it empty, plan
    and replay: the report. `hosts`: the cells' host load (for loadmark apps), by cell id."""
    config = config or SchedulerConfig()
    budget = budget.for_cells(cells)
    names = [f"z{i}" for i in range(zones)]

    def cluster(keep: Iterable[str] | None = None) -> list[CellOffer]:
        return make_cells(cells, zones, memory_mb, containers, keep, hosts)

    starts = [dataclasses.replace(r, index=i) for r in requests.values() for i in range(r.total_instances)]
    placed = schedule(cluster(), starts, config=config)
    where: Where = {(a.process_guid, a.index): a.cell_id for a in placed.lrp_assignments}
    zone_of = {c.cell_id: c.zone for c in cluster()}
    before = spread(where, zone_of, names)
    lost = sorted(key for key, cell_id in where.items() if zone_of[cell_id] == names[0])
    for key in lost:
        del where[key]
    survivors = holding(cluster(names[1:]), where, requests)
    again = schedule(survivors, [dataclasses.replace(requests[pg], index=i) for pg, i in lost], config=config)
    where.update({(a.process_guid, a.index): a.cell_id for a in again.lrp_assignments})
    during = spread(where, zone_of, names)

    t0 = time.perf_counter()
    moves = plan_moves(
        holding(cluster(), where, requests),
        [Placed(pg, i, c) for (pg, i), c in where.items()],
        requests,
        config=config,
    )
    plan_s = time.perf_counter() - t0
    for m in moves:
        where[(m.process_guid, m.index)] = m.to_cell
    after = spread(where, zone_of, names)

    # Running over time: the outage (t=0) takes the lost zone's instances, the evacuation (one move's time)
    # brings them back elsewhere, the zone returns at twice that, then the moves.
    desired = {pg: r.total_instances for pg, r in requests.items()}
    lost_of = Counter(pg for pg, _ in lost)
    returned_at = 2 * budget.move_s
    replayed = replay(moves, desired, budget, start=returned_at)
    running = {
        pg: [(0.0, n - lost_of[pg]), (budget.move_s, n), *replayed.running[pg]] for pg, n in desired.items()
    }
    return {
        "cells": cells,
        "zones": zones,
        "apps": len(requests),
        "instances": len(where),
        "unplaced_in_evacuation": len(again.failures),
        "spread": {"before": before, "during": during, "after": after},
        "worst_zone_skew": {
            "before": worst_skew(before),
            "during": worst_skew(during),
            "after": worst_skew(after),
        },
        "plan_s": round(plan_s, 4),
        "moves": [m.to_wire() for m in moves],
        "moves_by_reason": dict(Counter(m.reason for m in moves)),
        "budget": {
            "in_flight": budget.in_flight,
            "per_app": 1,
            "per_minute": budget.per_minute,
            "move_s": budget.move_s,
        },
        "execute_s_simulated": round(replayed.seconds - returned_at, 1),
        "min_running_ratio_while_rebalancing": replayed.lowest_ratio,
        "running_over_time": {pg: [[round(t, 2), n] for t, n in points] for pg, points in running.items()},
    }


def zone_outage_and_return(seed: int) -> dict[str, Any]:
    """The scenario at its size: 30 cells of 8 GiB in 3 zones, 20 apps of 3-15 instances (128-512 MB)."""
    rng = random.Random(seed)
    requests = {}
    for a in range(20):
        pg = f"app-{a}"
        requests[pg] = LRPStart(pg, 0, Ask(rng.choice((128, 256, 512)), 256), rng.randint(3, 15))
    return outage_and_return(30, 3, requests, 8 * 1024, 100, Budget())
