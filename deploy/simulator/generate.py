"""Workload generators for `vendue simulate --generate`: plain dicts in the workload-file format.

Every generator is deterministic for its seed (one `random.Random(seed)`, no global state) and returns
what `deploy.simulator.workload.parse_workload` accepts, so a generated file is checked like any other.

- `mixed`: production-like — several zones, mixed cell sizes, apps of 64–2048 MB with a long tail of
  instance counts, some prefill, a few tasks, a few cells reserved by a placement tag.
- `cold-start-small`: Diego's cold start — unique 1 MB apps on 100 MB / 100 MB / 100-container cells.
- `cold-start-large`: Diego's large cold start — per cell 72 × 1 MB, 8 × 2 MB and 2 × 4 MB instances,
  half unique apps and half instances of 4 colours per size, shuffled.
- `benchmark` / `benchmark-fits`: 32 GiB cells, apps of 1–100 instances; 128–1024 MB (a batch larger
  than the cluster: about a third fails) or 64–512 MB (fits).
"""

from __future__ import annotations

import random
from collections.abc import Callable

STACK = "cflinuxfs4"
GIB = 1024


def zone_names(zones: int) -> list[str]:
    return [f"z{i}" for i in range(zones)]


def _cell(cell_id: str, zone: str, memory_mb: int, disk_mb: int, containers: int, **extra) -> dict:
    return {"id": cell_id, "zone": zone, "memory_mb": memory_mb, "disk_mb": disk_mb,
            "containers": containers, "stack": STACK, **extra}


def _lrp(process_guid: str, index: int, memory_mb: int, disk_mb: int, **extra) -> dict:
    return {"process_guid": process_guid, "index": index, "memory_mb": memory_mb, "disk_mb": disk_mb, **extra}


def _workload(
    name: str, cells: list[dict], lrps: list[dict], tasks: list[dict] | None = None, **extra
) -> dict:
    return {"name": name, "cells": cells, "lrps": lrps, "tasks": tasks or [], **extra}


# --- Diego's simulation scenarios -------------------------------------------------------------------

# Diego's cold-start pairs (cells: unique apps); other sizes get five apps a cell.
DIEGO_COLD_START = {4: 8, 10: 40, 20: 200, 40: 800}


def diego_cells(count: int, zones: int = 2, memory_mb: int = 100, disk_mb: int = 100,
                containers: int = 100) -> list[dict]:
    """Diego's simulation cells: 100 MB, 100 MB, 100 containers; zones Z0, Z1, ... alternating by cell."""
    return [_cell(f"cell-{i}", f"Z{i % zones}", memory_mb, disk_mb, containers) for i in range(count)]


def cold_start_small(cells: int | None = None, zones: int | None = None, instances: int | None = None,
                     seed: int = 0) -> dict:
    cells = cells or 10
    zones = zones or 2
    instances = instances if instances is not None else DIEGO_COLD_START.get(cells, 5 * cells)
    lrps = [_lrp(f"app-{i}", 0, 1, 1) for i in range(instances)]
    random.Random(seed).shuffle(lrps)
    return _workload(f"cold-start-small-{cells}x{instances}", diego_cells(cells, zones), lrps)


LARGE_COLD_START_PER_CELL = ((1, 72), (2, 8), (4, 2))  # (memory MB, instances per cell)
COLOURS = ("red", "green", "blue", "yellow")


def cold_start_large(cells: int | None = None, zones: int | None = None, instances: int | None = None,
                     seed: int = 0) -> dict:
    """`instances` is ignored: the batch is sized from the cells, as in Diego's suite."""
    cells = cells or 25
    zones = zones or 2
    rng = random.Random(seed)
    lrps: list[dict] = []
    next_index: dict[str, int] = {}
    for memory_mb, per_cell in LARGE_COLD_START_PER_CELL:
        total = per_cell * cells
        unique = total // 2
        lrps += [_lrp(f"app-{memory_mb}mb-{i}", 0, memory_mb, 1) for i in range(unique)]
        for _ in range(total - unique):
            guid = f"{rng.choice(COLOURS)}-{memory_mb}mb"
            index = next_index.get(guid, 0)
            next_index[guid] = index + 1
            lrps.append(_lrp(guid, index, memory_mb, 1))
    rng.shuffle(lrps)
    return _workload(f"cold-start-large-{cells}", diego_cells(cells, zones), lrps)


# --- production-like --------------------------------------------------------------------------------

APP_SIZES_MB = (64, 128, 256, 512, 1024, 2048)
APP_SIZE_WEIGHTS = (15, 25, 25, 20, 10, 5)
CELL_SIZES_MB = (16 * GIB, 32 * GIB, 64 * GIB)
CELL_SIZE_WEIGHTS = (25, 60, 15)
ISOLATION_TAG = "isolation-segment"


def _long_tail_instances(rng: random.Random, cap: int) -> int:
    # Pareto: most apps run 1–3 instances, a few run dozens or hundreds.
    return max(1, min(cap, int(rng.paretovariate(1.2))))


def _disk_for(memory_mb: int) -> int:
    return 1024 if memory_mb <= 512 else 2048


def mixed(cells: int | None = None, zones: int | None = None, instances: int | None = None,
          seed: int = 0) -> dict:
    cells = cells or 50
    zones = zones or 3
    instances = instances if instances is not None else 40 * cells
    rng = random.Random(seed)
    names = zone_names(zones)
    isolated = max(1, cells // 20) if cells >= 4 else 0
    cell_dicts = []
    free: list[list[int]] = []
    for i in range(cells):
        memory = rng.choices(CELL_SIZES_MB, CELL_SIZE_WEIGHTS)[0]
        extra: dict = {"prefill": []}
        if i < isolated:
            extra["placement_tags"] = [ISOLATION_TAG]
        elif i % 3 == 1:
            extra["optional_placement_tags"] = ["ssd"]
        cell_dicts.append(_cell(f"cell-{i}", names[i % zones], memory, 4 * memory, 250, **extra))
        free.append([memory, 4 * memory, 250])

    # Prefill: older apps fill about a quarter of the memory, spread at random.
    target = sum(c["memory_mb"] for c in cell_dicts) // 4
    used = 0
    app = 0
    while used < target and cells > isolated:
        memory = rng.choices(APP_SIZES_MB, APP_SIZE_WEIGHTS)[0]
        count = _long_tail_instances(rng, 100)
        placed = 0
        for index in range(count):
            pos = rng.randrange(isolated, cells)
            slot = free[pos]
            if slot[0] < memory or slot[1] < _disk_for(memory) or slot[2] < 1:
                continue
            slot[0] -= memory
            slot[1] -= _disk_for(memory)
            slot[2] -= 1
            cell_dicts[pos]["prefill"].append(
                {
                    "process_guid": f"old-app-{app}",
                    "index": index,
                    "memory_mb": memory,
                    "disk_mb": _disk_for(memory),
                }
            )
            used += memory
            placed += 1
        app += 1
        if placed == 0:
            break

    # New work: apps until `instances` is reached; a few need the isolation segment or a second stack.
    lrps: list[dict] = []
    app = 0
    while len(lrps) < instances:
        memory = rng.choices(APP_SIZES_MB, APP_SIZE_WEIGHTS)[0]
        count = min(_long_tail_instances(rng, 200), instances - len(lrps))
        extra = {}
        roll = rng.random()
        if roll < 0.06:  # tagged apps are small: they share a handful of cells
            extra["placement_tags"] = [ISOLATION_TAG] if isolated and roll < 0.03 else ["ssd"]
            count = min(count, 10)
        extra["total_instances"] = count
        lrps += [_lrp(f"app-{app}", index, memory, _disk_for(memory), **extra) for index in range(count)]
        app += 1
    tasks = [
        {"task_guid": f"task-{i}", "memory_mb": rng.choice((128, 256, 512, 1024)), "disk_mb": 1024}
        for i in range(max(1, instances // 50))
    ]
    return _workload(f"mixed-{cells}c-{instances}i-s{seed}", cell_dicts, lrps, tasks)


# --- benchmark --------------------------------------------------------------------------------------

BENCH_CELL = {"memory_mb": 32 * GIB, "disk_mb": 64 * GIB, "containers": 250}
BENCH_SIZES_OVERFLOW = (128, 256, 512, 1024)
BENCH_SIZES_FITS = (64, 128, 256, 512)


def _benchmark(sizes: tuple[int, ...], label: str, cells: int | None, zones: int | None,
               instances: int | None, seed: int) -> dict:
    cells = cells or 1000
    zones = zones or 3
    instances = instances if instances is not None else 100_000
    rng = random.Random(seed)
    names = zone_names(zones)
    cell_dicts = [_cell(f"cell-{i}", names[i % zones], **BENCH_CELL) for i in range(cells)]
    lrps: list[dict] = []
    app = 0
    while len(lrps) < instances:
        memory = rng.choice(sizes)
        count = min(rng.randint(1, 100), instances - len(lrps))
        guid = f"app-{app}"
        lrps += [_lrp(guid, index, memory, memory, total_instances=count) for index in range(count)]
        app += 1
    return _workload(f"{label}-{cells}c-{instances}i-s{seed}", cell_dicts, lrps)


def benchmark(cells: int | None = None, zones: int | None = None, instances: int | None = None,
              seed: int = 0) -> dict:
    return _benchmark(BENCH_SIZES_OVERFLOW, "benchmark", cells, zones, instances, seed)


def benchmark_fits(cells: int | None = None, zones: int | None = None, instances: int | None = None,
                   seed: int = 0) -> dict:
    return _benchmark(BENCH_SIZES_FITS, "benchmark-fits", cells, zones, instances, seed)


Generator = Callable[..., dict]

GENERATORS: dict[str, Generator] = {
    "mixed": mixed,
    "cold-start-small": cold_start_small,
    "cold-start-large": cold_start_large,
    "benchmark": benchmark,
    "benchmark-fits": benchmark_fits,
}


def generate(name: str, cells: int | None = None, zones: int | None = None, instances: int | None = None,
             seed: int = 0) -> dict:
    try:
        generator = GENERATORS[name]
    except KeyError:
        raise ValueError(f"unknown generator {name!r} (expected one of {', '.join(GENERATORS)})") from None
    return generator(cells=cells, zones=zones, instances=instances, seed=seed)
