"""Diego's own simulation expectations (its auction simulation suite), on both engines, strategy diego.

"Even" is Diego's measure: the instances this batch placed, counted per cell that received any, all
within the tolerance of their mean. Cells are Diego's: 100 MB memory, 100 MB disk, 100 containers,
zones Z0/Z1 alternating; work is 1 MB LRPs with 1 MB of disk.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from deploy.simulator.engine import to_engine
from deploy.simulator.generate import cold_start_large, cold_start_small
from deploy.simulator.workload import parse_workload

from .diego_cluster import (
    ENGINES,
    assert_even,
    diego_cell,
    instances_of,
    placed_per_cell,
    run,
    unique_apps,
    unique_running,
)

engines = pytest.mark.parametrize("engine", ENGINES)


@engines
@pytest.mark.parametrize(("apps", "cells"), [(8, 4), (40, 10), (200, 20), (800, 40)])
def test_cold_start_of_unique_apps_is_even_within_one(engine: str, apps: int, cells: int) -> None:
    workload = to_engine(parse_workload(cold_start_small(cells=cells, instances=apps, seed=7)))
    assert len(workload.lrps) == apps and len(workload.cells) == cells

    result = run(workload.cells, workload.lrps, engine=engine)

    assert result.failures == []
    assert len(result.lrp_assignments) == apps
    assert len(placed_per_cell(result)) == cells  # every cell took its share
    assert_even(result, 1)


@engines
@pytest.mark.parametrize(
    "cells", [25, pytest.param(100, marks=pytest.mark.slow)],
)
def test_large_cold_start_is_even_within_ten(engine: str, cells: int) -> None:
    workload = to_engine(parse_workload(cold_start_large(cells=cells, seed=11)))
    # 72 × 1 MB, 8 × 2 MB and 2 × 4 MB per cell: 96 of each cell's 100 MB.
    assert Counter(lrp.ask.memory_mb for lrp in workload.lrps) == {1: 72 * cells, 2: 8 * cells, 4: 2 * cells}

    result = run(workload.cells, workload.lrps, engine=engine)

    assert result.failures == []
    assert_even(result, 10)


@engines
@pytest.mark.parametrize(("empty", "apps"), [(5, 500), (1, 100)])
def test_imbalanced_cluster_does_not_overload_the_empty_cells(engine: str, empty: int, apps: int) -> None:
    cells = [diego_cell(i, unique_running(50, f"old-{i}") if i < 100 - empty else ()) for i in range(100)]

    result = run(cells, unique_apps(apps), engine=engine)

    assert result.failures == []
    assert_even(result, 1)
    per_cell = placed_per_cell(result)
    empties = [f"cell-{i}" for i in range(100 - empty, 100)]
    mean = apps / 100
    assert all(per_cell[c] <= mean + 1 for c in empties)


@engines
@pytest.mark.parametrize(("cells", "instances"), [(10, 80), (30, 200), (100, 400)])
def test_watters_demo_spreads_one_app_evenly(engine: str, cells: int, instances: int) -> None:
    rng = random.Random(cells)
    cluster = [diego_cell(i, unique_running(rng.randint(78, 80), f"old-{i}")) for i in range(cells)]

    result = run(cluster, instances_of("red", instances), engine=engine)

    assert result.failures == []
    assert len(result.lrp_assignments) == instances
    assert_even(result, 1)


@engines
def test_instances_balance_across_zones_not_cells(engine: str) -> None:
    # cell-0 and cell-2 are in Z0; cell-1, alone in Z1, already runs 50 other instances.
    cells = [diego_cell(0), diego_cell(1, unique_running(50, "old")), diego_cell(2)]

    result = run(cells, instances_of("web", 40), engine=engine)

    assert result.failures == []
    zone_of = {c.cell_id: c.zone for c in cells}
    per_zone = Counter(zone_of[a.cell_id] for a in result.lrp_assignments)
    assert per_zone == {"Z0": 20, "Z1": 20}


@engines
def test_full_cell_places_first_index_of_big_app_and_fails_the_rest(engine: str) -> None:
    lrps = [*unique_apps(80), *instances_of("big", 2, memory_mb=50)]

    result = run([diego_cell(0)], lrps, engine=engine)

    assert len(result.lrp_assignments) == 51
    assert len(result.failures) == 31
    placed = {(a.process_guid, a.index) for a in result.lrp_assignments}
    assert ("big", 0) in placed
    big_failures = [f for f in result.failures if f.process_guid == "big"]
    assert [(f.index, f.error) for f in big_failures] == [(1, "insufficient resources: memory")]
    assert {f.error for f in result.failures} == {"insufficient resources: memory"}
