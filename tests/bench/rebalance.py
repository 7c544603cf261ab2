"""Rebalancing benchmark: a zone evacuated and returned, then planned and carried out.

    python tests/bench/rebalance.py [--cells 1000] [--zones 3] [--instances 60000] [--apps 1000]
                                    [--move-seconds 2] [--in-flight 5] [--moves-per-minute 0] [--seed 1]
                                    [--strategies diego[,loadmark,objective...]] [--loaded-hosts]

On simulated cells (the engine's plain data, no processes; deploy/simulator/rebalance.py, the simulator's
`zone-outage-and-return` scenario at this size): every instance placed by the engine (diego strategy);
the first zone's cells leave and the engine places their instances on the other zones (the evacuation);
the cells return empty; `placement/rebalance/` plans (timed: `plan_s`). The moves are then
replayed on simulated time with the BBS's default budget (bbs/settings.py, bbs/rebalance_budget.py: 5 in
flight, one per app, one started per present cell a minute and at least 60; `--moves-per-minute N` fixes
it), each taking `--move-seconds` from its start to the old instance's stop: `execute_s`
is that simulated time, and `min_running_ratio` the lowest running/desired of any app while rebalancing
(must be 1.0). Cells hold 32 GiB: two zones hold everything. Prints ONE JSON object; never asserts on
time. Target: plan_s < 5 at full size, worst zone skew after <= 1.

What the later rules cost (load mark, strategy margin): `--strategies` gives the apps these strategies in
turn, and `--loaded-hosts` each cell a host swapping 0, 10 or 30 % and a load average of 0.5, 3 or 9 on
4 cores (seeded), so that the load-mark rule has hot cells to relieve.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bbs.settings import BBSSettings  # noqa: E402
from deploy.simulator.rebalance import Budget, outage_and_return  # noqa: E402
from placement.ask import Ask  # noqa: E402
from placement.cell_offer import HostMetrics  # noqa: E402
from placement.work import LRPStart  # noqa: E402

CELL_MEMORY_MB = 32_768
CELL_CONTAINERS = 250


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
    parser.add_argument("--strategies", default="diego", help="comma-separated: the apps' strategies in turn")
    parser.add_argument("--loaded-hosts", action="store_true", help="hosts swapping and loaded (seeded)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    per_app = args.instances // args.apps
    strategies = args.strategies.split(",")

    def ask(a: int) -> Ask:
        return Ask(rng.choice((128, 256, 512)), 256, strategy=strategies[a % len(strategies)])

    requests = {
        f"app-{a:05d}": LRPStart(
            f"app-{a:05d}", 0, ask(a), per_app
        )
        for a in range(args.apps)
    }
    budget = Budget(args.in_flight, args.moves_per_minute, args.move_seconds)
    hosts = loaded_hosts(args.cells, args.seed) if args.loaded_hosts else None
    report = outage_and_return(
        args.cells, args.zones, requests, CELL_MEMORY_MB, CELL_CONTAINERS, budget, hosts=hosts
    )
    skew = report["worst_zone_skew"]
    print(
        json.dumps(
            {
                "cells": args.cells,
                "strategies": strategies,
                "loaded_hosts": args.loaded_hosts,
                "zones": args.zones,
                "instances": report["instances"],
                "apps": args.apps,
                "unplaced_in_evacuation": report["unplaced_in_evacuation"],
                "plan_s": report["plan_s"],
                "moves_planned": len(report["moves"]),
                "moves_by_reason": report["moves_by_reason"],
                "execute_s_simulated": report["execute_s_simulated"],
                "budget": report["budget"],
                "worst_zone_skew_before": skew["during"],
                "worst_zone_skew_after": skew["after"],
                "min_running_ratio": report["min_running_ratio_while_rebalancing"],
                "plan_target_met": report["plan_s"] < 5.0 and skew["after"] <= 1,
            }
        )
    )


def loaded_hosts(cells: int, seed: int) -> dict[str, HostMetrics]:
    rng = random.Random(seed)
    return {
        f"cell-{i:04d}": HostMetrics(
            swap_used_mb=rng.choice((0, 100, 300)), swap_total_mb=1000, load5=rng.choice((0.5, 3, 9)), cores=4
        )
        for i in range(cells)
    }


if __name__ == "__main__":
    main()
