"""Rebalancing benchmark (issue #18): a zone evacuated and returned, then planned and carried out.

    python tests/bench/rebalance.py [--cells 1000] [--zones 3] [--instances 60000] [--apps 1000]
                                    [--move-seconds 2] [--in-flight 5] [--moves-per-minute 60] [--seed 1]

On simulated cells (the engine's plain data, no processes): every instance placed by the engine (diego
strategy); the first zone's cells leave and the engine places their instances on the other zones (the
evacuation); the cells return empty; `auctioneer/engine/rebalance.py` plans (timed: `plan_s`). The moves
are then replayed on simulated time with the BBS's default budget (bbs/settings.py: 5 in flight, one per
app, 60 started per minute), each taking `--move-seconds` from its start to the old instance's stop
(make-before-break: the app runs one more instance meanwhile): `execute_s` is that simulated time, and
`min_running_ratio` the lowest running/desired of any app at any moment (must be 1.0). The worst zone
skew (most minus fewest instances of one app per zone) before and after. Prints ONE JSON object; never
asserts on time. Target: plan_s < 5 at full size, worst skew after <= 1.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time
from collections import Counter, defaultdict, deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from auctioneer.engine import schedule  # noqa: E402
from auctioneer.engine.rebalance import Move, Placed, plan_moves  # noqa: E402
from auctioneer.engine.types import Cell, LRPStart, Resources, SchedulerConfig  # noqa: E402
from bbs.settings import BBSSettings  # noqa: E402

CELL_MEMORY_MB = 32_768
CELL_CONTAINERS = 250


def make_cells(n: int, zones: int, keep: set[str] | None = None) -> list[Cell]:
    cells = []
    for i in range(n):
        zone = f"z{i % zones}"
        if keep is None or zone in keep:
            size = Resources(CELL_MEMORY_MB, 4 * CELL_MEMORY_MB, CELL_CONTAINERS)
            cells.append(
                Cell(f"cell-{i:04d}", zone, size, Resources(size.memory_mb, size.disk_mb, size.containers))
            )
    return cells


def holding(
    cells: list[Cell], where: dict[tuple[str, int], str], requests: dict[str, LRPStart]
) -> list[Cell]:
    """The cells with these instances on them (available reduced, counts per app)."""
    by_id = {c.cell_id: c for c in cells}
    for (pg, _), cell_id in where.items():
        cell, item = by_id[cell_id], requests[pg]
        a = cell.available
        cell.available = Resources(a.memory_mb - item.memory_mb, a.disk_mb - item.disk_mb, a.containers - 1)
        cell.lrp_counts[pg] = cell.lrp_counts.get(pg, 0) + 1
    return cells


def worst_skew(where: dict[tuple[str, int], str], zone_of: dict[str, str], zones: list[str]) -> int:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for (pg, _), cell_id in where.items():
        counts[pg][zone_of[cell_id]] += 1
    return max((max(c[z] for z in zones) - min(c[z] for z in zones) for c in counts.values()), default=0)


def replay(
    moves: list[Move], desired: dict[str, int], move_s: float, in_flight: int, per_minute: int
) -> tuple[float, float]:
    """The moves on simulated time under the BBS's budget: (seconds until the last finished, the lowest
    running/desired of any app at any moment). Make-before-break: a move's app runs one more instance
    from its start until its old instance stops."""
    queue = deque(moves)
    running = dict(desired)
    ends: list[tuple[float, str]] = []  # (finish time, app)
    busy: set[str] = set()
    starts: deque[float] = deque()
    now, lowest = 0.0, 1.0
    while queue or ends:
        while starts and starts[0] <= now - 60.0:
            starts.popleft()
        waiting: deque[Move] = deque()
        while queue and len(ends) < in_flight and len(starts) < per_minute:
            move = queue.popleft()
            if move.process_guid in busy:
                waiting.append(move)
                continue
            busy.add(move.process_guid)
            starts.append(now)
            heapq.heappush(ends, (now + move_s, move.process_guid))
            running[move.process_guid] += 1  # the new instance runs before the old one stops
        queue.extendleft(reversed(waiting))
        next_start = starts[0] + 60.0 if len(starts) >= per_minute and queue else None
        if ends and (next_start is None or ends[0][0] <= next_start):
            now, app = heapq.heappop(ends)
            running[app] -= 1  # the old instance stops
            busy.discard(app)
            lowest = min(lowest, running[app] / desired[app])
        elif next_start is not None:
            now = next_start
        else:
            break
    return now, lowest


def main() -> None:
    defaults = BBSSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--instances", type=int, default=60_000)
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--move-seconds", type=float, default=2.0)
    parser.add_argument("--in-flight", type=int, default=defaults.rebalance_in_flight)
    parser.add_argument("--moves-per-minute", type=int, default=defaults.rebalance_moves_per_minute)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    zones = [f"z{i}" for i in range(args.zones)]
    per_app = args.instances // args.apps
    requests = {
        f"app-{a:05d}": LRPStart(f"app-{a:05d}", 0, rng.choice((128, 256, 512)), 256, total_instances=per_app)
        for a in range(args.apps)
    }
    starts = [
        LRPStart(r.process_guid, i, r.memory_mb, r.disk_mb, total_instances=per_app)
        for r in requests.values()
        for i in range(per_app)
    ]
    config = SchedulerConfig()

    t0 = time.perf_counter()
    placed = schedule(make_cells(args.cells, args.zones), starts, config=config)
    where = {(a.process_guid, a.index): a.cell_id for a in placed.lrp_assignments}
    all_cells = make_cells(args.cells, args.zones)
    zone_of = {c.cell_id: c.zone for c in all_cells}
    # The first zone leaves: its instances are placed on the others.
    lost = [key for key, cell_id in where.items() if zone_of[cell_id] == zones[0]]
    for key in lost:
        del where[key]
    survivors = holding(make_cells(args.cells, args.zones, set(zones[1:])), where, requests)
    again = schedule(
        survivors,
        [
            LRPStart(pg, i, requests[pg].memory_mb, requests[pg].disk_mb, total_instances=per_app)
            for pg, i in lost
        ],
        config=config,
    )
    where.update({(a.process_guid, a.index): a.cell_id for a in again.lrp_assignments})
    setup_s = time.perf_counter() - t0

    # It returns, empty: plan.
    before = worst_skew(where, zone_of, zones)
    cells = holding(make_cells(args.cells, args.zones), where, requests)
    t1 = time.perf_counter()
    moves = plan_moves(cells, [Placed(pg, i, c) for (pg, i), c in where.items()], requests, config=config)
    plan_s = time.perf_counter() - t1
    for m in moves:
        where[(m.process_guid, m.index)] = m.to_cell
    after = worst_skew(where, zone_of, zones)
    desired = {pg: per_app for pg in requests}
    execute_s, lowest = replay(moves, desired, args.move_seconds, args.in_flight, args.moves_per_minute)
    print(
        json.dumps(
            {
                "cells": args.cells,
                "zones": args.zones,
                "instances": len(where),
                "apps": args.apps,
                "unplaced_in_evacuation": len(again.failures),
                "setup_s": round(setup_s, 3),
                "plan_s": round(plan_s, 3),
                "moves_planned": len(moves),
                "moves_by_reason": dict(Counter(m.reason for m in moves)),
                "execute_s_simulated": round(execute_s, 1),
                "move_seconds": args.move_seconds,
                "budget": {"in_flight": args.in_flight, "per_app": 1, "per_minute": args.moves_per_minute},
                "worst_zone_skew_before": before,
                "worst_zone_skew_after": after,
                "min_running_ratio": lowest,
                "plan_target_met": plan_s < 5.0 and after <= 1,
            }
        )
    )


if __name__ == "__main__":
    main()
