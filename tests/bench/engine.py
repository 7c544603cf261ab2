"""Placement engine benchmark: prints one JSON object. Never asserts on time.

    python tests/bench/engine.py            # 1,000 cells, 100,000 instances (and the variant that fits)
    python tests/bench/engine.py --quick    # 100 cells, 10,000 instances: a smoke run

The cluster is the `benchmark` generator's: cells of 32 GiB memory, 64 GiB disk and 250 containers in 3
zones, apps of 1–100 instances. `overflow` asks for 128–1024 MB a instance — more than the cluster holds,
so about a third must fail, fast and with Diego's error; `fits` asks for 64–512 MB. `large-apps` has
apps of 500–2,000 instances of 128–512 MB on the same cells: more instances of each app than there are
cells, so the +1000 per instance of the app already on a cell is on every cell (Diego's spread).

For each variant the fast engine schedules the whole batch. The reference engine (every feasible cell
scored for every item) is run on the first `--reference-subset` instances only, and its full-batch
time is extrapolated linearly from that (its cost per item is proportional to the cells, not the
batch); the fast engine is run on the same subset and the two assignments compared, and both engines
run one whole overflowing batch on a twentieth of the cells, failures included. A scaling row runs
the fast engine on 25 %, 50 % and 100 % of the overflowing batch to show cost grows about linearly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable from anywhere in the checkout

from deploy.simulator.engine import EngineInput, summarise, to_engine  # noqa: E402
from deploy.simulator.generate import generate  # noqa: E402
from deploy.simulator.workload import parse_workload  # noqa: E402
from placement import schedule  # noqa: E402
from placement.ask import Ask  # noqa: E402
from placement.strategies import pickers  # noqa: E402
from placement.types import SchedulerConfig  # noqa: E402

CACHED_PER_CELL = 64  # as many as a rep reports (rep/cell.py REPORTED_BLOBS)


def timed_schedule(inputs: EngineInput, engine: str, strategy: str, seed: int, cache_weight: float = 0.0):
    config = SchedulerConfig(strategy=strategy, engine=engine, seed=seed, cache_weight=cache_weight)
    started = time.perf_counter()
    result = schedule(inputs.cells, inputs.lrps, inputs.tasks, config)
    return result, time.perf_counter() - started


def first(inputs: EngineInput, instances: int) -> EngineInput:
    return EngineInput(cells=inputs.cells, lrps=inputs.lrps[:instances], tasks=inputs.tasks[:0])


def with_cached_blobs(inputs: EngineInput, seed: int) -> EngineInput:
    """Every app names a source blob (its instances still share one ask) and every cell's host caches
    CACHED_PER_CELL apps' blobs, drawn at random."""
    rng = random.Random(seed)
    asks: dict[str, Ask] = {}
    lrps = []
    for lrp in inputs.lrps:
        pg = lrp.process_guid
        ask = asks.get(pg)
        if ask is None:
            ask = asks[pg] = dataclasses.replace(lrp.ask, source_blob=f"blob-{pg}")
        lrps.append(dataclasses.replace(lrp, ask=ask))
    apps = sorted(asks)
    cells = [dataclasses.replace(c, cached_blobs=frozenset(
        f"blob-{a}" for a in rng.sample(apps, min(CACHED_PER_CELL, len(apps))))) for c in inputs.cells]
    return EngineInput(cells=cells, lrps=lrps, tasks=inputs.tasks)


def run_row(workload, inputs: EngineInput, engine: str, strategy: str, seed: int,
            cache_weight: float = 0.0) -> dict:
    result, seconds = timed_schedule(inputs, engine, strategy, seed, cache_weight)
    report = summarise(workload, inputs, result, seconds, strategy, engine, seed)
    placed = report["placed"]
    return {
        "engine": engine,
        "instances": len(inputs.lrps),
        "placed": placed,
        "failed": report["failed"],
        "seconds": round(seconds, 4),
        "placements_per_s": round(placed / seconds, 1) if seconds else None,
        "items_per_s": round(len(inputs.lrps) / seconds, 1) if seconds else None,
        "cv_memory": report["cv_memory"],
        "failures_by_error": report["failures_by_error"],
    }, result


def large_apps(args) -> dict:
    """The benchmark's cells, with apps of 500–2,000 instances (128–512 MB) up to `args.instances`."""
    rng = random.Random(args.seed)
    cells = [{"id": f"cell-{i}", "zone": f"z{i % args.zones}", "memory_mb": 32 * 1024, "disk_mb": 64 * 1024,
              "containers": 250, "stack": "cflinuxfs4"} for i in range(args.cells)]
    lrps: list[dict] = []
    app = 0
    while len(lrps) < args.instances:
        memory = rng.choice((128, 256, 512))
        count = min(rng.randint(500, 2000), args.instances - len(lrps))
        lrps += [{"process_guid": f"app-{app}", "index": index, "memory_mb": memory, "disk_mb": memory,
                  "total_instances": count} for index in range(count)]
        app += 1
    return {"name": f"large-apps-{args.cells}c-{args.instances}i-s{args.seed}", "cells": cells, "lrps": lrps,
            "tasks": []}


def build(generator: str, args):
    if generator == "large-apps":
        workload = parse_workload(large_apps(args))
    else:
        workload = parse_workload(
            generate(generator, cells=args.cells, zones=args.zones, instances=args.instances, seed=args.seed)
        )
    inputs = to_engine(workload)
    return workload, with_cached_blobs(inputs, args.seed) if args.cache_weight else inputs


def variant(name: str, workload, inputs: EngineInput, setup_seconds: float, args, strategy: str) -> dict:

    weight = args.cache_weight
    fast_row, _ = run_row(workload, inputs, "fast", strategy, args.seed, weight)

    subset = first(inputs, min(args.reference_subset, len(inputs.lrps)))
    reference_row, reference_result = run_row(workload, subset, "reference", strategy, args.seed, weight)
    fast_subset_row, fast_subset_result = run_row(workload, subset, "fast", strategy, args.seed, weight)
    identical = (
        fast_subset_result.lrp_assignments == reference_result.lrp_assignments
        and fast_subset_result.failures == reference_result.failures
    )
    scale = len(inputs.lrps) / max(1, len(subset.lrps))
    reference_row["extrapolated_full_batch_seconds"] = round(reference_row["seconds"] * scale, 2)
    reference_row["note"] = (
        f"measured on the first {len(subset.lrps)} of {len(inputs.lrps)} instances; "
        "full-batch seconds extrapolated linearly"
    )
    return {
        "variant": name,
        "workload": workload.name,
        "cells": len(inputs.cells),
        "instances": len(inputs.lrps),
        "apps": len({lrp.process_guid for lrp in inputs.lrps}),
        "setup_seconds": round(setup_seconds, 2),
        "fast": fast_row,
        "reference_subset": reference_row,
        "fast_subset": fast_subset_row,
        "subset_assignments_identical": identical,
        "fast_speedup_on_subset": (
            round(reference_row["seconds"] / fast_subset_row["seconds"], 1)
            if fast_subset_row["seconds"]
            else None
        ),
    }


def overflowing_common_input(args, strategy: str) -> dict:
    """Both engines on one whole overflowing batch, small enough for the reference: failures compared too."""
    cells = max(1, args.cells // 20)
    instances = args.reference_subset
    workload = parse_workload(
        generate("benchmark", cells=cells, zones=args.zones, instances=instances, seed=args.seed)
    )
    inputs = to_engine(workload)
    if args.cache_weight:
        inputs = with_cached_blobs(inputs, args.seed)
    weight = args.cache_weight
    fast_row, fast_result = run_row(workload, inputs, "fast", strategy, args.seed, weight)
    reference_row, reference_result = run_row(workload, inputs, "reference", strategy, args.seed, weight)
    return {
        "workload": workload.name,
        "cells": cells,
        "instances": instances,
        "fast": fast_row,
        "reference": reference_row,
        "assignments_and_failures_identical": (
            fast_result.lrp_assignments == reference_result.lrp_assignments
            and fast_result.failures == reference_result.failures
        ),
    }


def scaling(inputs: EngineInput, args, strategy: str) -> list[dict]:
    rows = []
    for fraction in (0.25, 0.5, 1.0):
        part = first(inputs, int(len(inputs.lrps) * fraction))
        result, seconds = timed_schedule(part, "fast", strategy, args.seed, args.cache_weight)
        rows.append({
            "instances": len(part.lrps),
            "seconds": round(seconds, 4),
            "microseconds_per_instance": round(1e6 * seconds / max(1, len(part.lrps)), 2),
            "placed": len(result.lrp_assignments),
            "failed": len(result.failures),
        })
    base = rows[0]["seconds"] / max(1, rows[0]["instances"])
    for row in rows:
        row["cost_per_instance_vs_smallest"] = (
            round(row["seconds"] / max(1, row["instances"]) / base, 2) if base else None
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run (100 cells, 10,000 instances)")
    parser.add_argument("--cells", type=int, default=None)
    parser.add_argument("--zones", type=int, default=3)
    parser.add_argument("--instances", type=int, default=None)
    parser.add_argument("--reference-subset", type=int, default=None,
                        help="instances the reference engine schedules (default 5,000; quick 1,000)")
    parser.add_argument("--strategy", default="diego")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-scaling", action="store_true")
    parser.add_argument("--cache-weight", type=float, default=0.0,
                        help="apps name source blobs, cells cache some, and diego weighs the cache term")
    args = parser.parse_args(argv)
    args.cells = args.cells or (100 if args.quick else 1000)
    args.instances = args.instances or (10_000 if args.quick else 100_000)
    args.reference_subset = args.reference_subset or (1_000 if args.quick else 5_000)

    factories = {engine: pickers(engine)[args.strategy] for engine in ("fast", "reference")}
    started = time.perf_counter()
    out = {
        "benchmark": "engine",
        "quick": args.quick,
        "strategy": args.strategy,
        "seed": args.seed,
        "cache_weight": args.cache_weight,
        "pickers": {engine: f"{f.__module__}.{f.__qualname__}" for engine, f in factories.items()},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "variants": [],
    }
    overflow_inputs = None
    for name, generator in (
        ("overflow", "benchmark"),
        ("fits", "benchmark-fits"),
        ("large-apps", "large-apps"),
    ):
        setup_started = time.perf_counter()
        workload, inputs = build(generator, args)
        setup_seconds = time.perf_counter() - setup_started
        out["variants"].append(variant(name, workload, inputs, setup_seconds, args, args.strategy))
        if name == "overflow":
            overflow_inputs = inputs
    out["overflowing_common_input"] = overflowing_common_input(args, args.strategy)
    if not args.no_scaling:
        out["scaling_fast"] = scaling(overflow_inputs, args, args.strategy)
    out["total_seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
