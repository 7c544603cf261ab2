"""Zone balance on a cluster the work fills exactly: every app must end within one instance per zone.

The real-services scale benchmark (tests/bench/scale.py: 250,000 instances of 5,000 apps on 1,000 cells
of 250 containers, zones of 336/332/332 cells) is exactly full at the end, and the last apps placed used
to end up to 8 instances apart between zones: which equal-count zone got an app's n % Z extra instances
was left to the lowest cell score (then zone name), so the zone with more cells kept its extra room
until the last apps, which then had room in that zone only. These are the same situation at a size
that runs in a second: cells whose containers are the binding resource, apps of a few instances (and a
mix of memory sizes, so cell scores differ from cell to cell as at scale), the work arriving in several
batches that end with the cluster exactly full, and zones of unequal size. Both engines, which must
agree.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from placement.cell_offer import RunningInstance
from placement.testing import lrp_start

from .diego_cluster import ENGINES, diego_cell, run

MEMORY_MB, DISK_MB = 32 * 1024, 64 * 1024  # never binding here: containers are


def sizes_filling(rng: random.Random, total: int, low: int, high: int) -> list[int]:
    """App sizes in low..high (the last may be larger) that add up to exactly `total`."""
    sizes: list[int] = []
    left = total
    while left:
        size = min(left, rng.randint(low, high))
        if left - size < low:
            size = left
        sizes.append(size)
        left -= size
    return sizes


def fill_exactly(zones_of_cells: list[str], containers: int, apps: list[tuple[str, int, int]],
                 batches: list[list[int]], engine: str, log: list | None = None) -> dict[str, Counter[str]]:
    """Place the apps (guid, instances, memory) batch by batch, each auction seeing what the earlier ones
    placed; every instance must be placed. Returns each app's instances per zone (and appends every
    auction's assignments to `log`)."""
    held: list[list[RunningInstance]] = [[] for _ in zones_of_cells]
    for batch in batches:
        cells = [diego_cell(i, held[i], memory_mb=MEMORY_MB, disk_mb=DISK_MB, containers=containers,
                            zone=zone) for i, zone in enumerate(zones_of_cells)]
        lrps = [lrp_start(guid, index, memory, 2 * memory)
                for guid, n, memory in (apps[a] for a in batch) for index in range(n)]
        result = run(cells, lrps, engine=engine)
        assert result.failures == []
        if log is not None:
            log.append(result.lrp_assignments)
        for assignment in result.lrp_assignments:
            i = int(assignment.cell_id.removeprefix("cell-"))
            guid = assignment.process_guid
            memory = next(m for g, _, m in apps if g == guid)
            held[i].append(RunningInstance(guid, assignment.index, memory, 2 * memory))
    per_app: dict[str, Counter[str]] = {}
    for i, instances in enumerate(held):
        for inst in instances:
            per_app.setdefault(inst.process_guid, Counter())[zones_of_cells[i]] += 1
    assert sum(len(h) for h in held) == len(zones_of_cells) * containers  # exactly full
    return per_app


def skews(per_app: dict[str, Counter[str]], zones: list[str]) -> dict[str, int]:
    """Each app's max - min instances per zone, for the apps over one."""
    out = {}
    for guid, counts in per_app.items():
        skew = max(counts[z] for z in zones) - min(counts[z] for z in zones)
        if skew > 1:
            out[guid] = skew
    return out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 15])  # each skewed an app before
def test_small_apps_arriving_in_batches_fill_unequal_zones_within_one(engine: str, seed: int) -> None:
    # 31 cells of 10 containers: zones of 11, 10 and 10 cells; apps of 2-8 instances in 4 batches.
    rng = random.Random(seed)
    zones_of_cells = [f"z{i % 3}" for i in range(31)]
    apps = [(f"app-{a}", n, rng.choice((64, 96, 128))) for a, n in enumerate(sizes_filling(rng, 310, 2, 8))]
    cuts = sorted(rng.sample(range(1, len(apps)), 3))
    batches = [list(range(lo, hi)) for lo, hi in zip([0, *cuts], [*cuts, len(apps)], strict=True)]

    per_app = fill_exactly(zones_of_cells, 10, apps, batches, engine)

    assert skews(per_app, ["z0", "z1", "z2"]) == {}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("batches", [1, 5])
def test_the_scale_benchmark_s_shape_at_a_tenth_of_its_cells(engine: str, batches: int) -> None:
    # The benchmark's layout (hosts of cells numbered from 0, zone = number mod 3, so z0 has the most
    # cells) at 100 cells of 25 containers: zones of 36/32/32 cells; 250 apps of 5-15 instances, memory
    # 64/96/128 MB by app, arriving in one batch or in five.
    zones_of_cells = [f"z{i % 3}" for _host in range(4) for i in range(25)]
    rng = random.Random(7)
    sizes = sizes_filling(rng, 2500, 5, 15)
    apps = [(f"scale-{a}", n, 64 + 32 * (a % 3)) for a, n in enumerate(sizes)]
    step = -(-len(apps) // batches)
    groups = [list(range(lo, min(lo + step, len(apps)))) for lo in range(0, len(apps), step)]

    per_app = fill_exactly(zones_of_cells, 25, apps, groups, engine)

    assert skews(per_app, ["z0", "z1", "z2"]) == {}


def test_both_engines_fill_the_same_way() -> None:
    zones_of_cells = [f"z{i % 3}" for _host in range(2) for i in range(20)]
    rng = random.Random(3)
    apps = [(f"app-{a}", n, 64 + 32 * (a % 3)) for a, n in enumerate(sizes_filling(rng, 800, 3, 14))]
    batches = [list(range(lo, min(lo + 20, len(apps)))) for lo in range(0, len(apps), 20)]
    logs: dict[str, list] = {engine: [] for engine in ENGINES}
    for engine in ENGINES:
        fill_exactly(zones_of_cells, 20, apps, batches, engine, logs[engine])
    assert logs["fast"] == logs["reference"]
