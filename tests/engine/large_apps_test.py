"""Large apps: many instances of one process per cell, where the fast Diego engine must not fall back to
looking at cells one by one.

Once every cell of a zone holds an instance of an app, each further instance's score carries
1000 × instances of the app on the cell for every cell. The fast engine keeps the cells of each pool
grouped by that count per process (levels) and looks only at the lowest level unless a higher one can
still win. These tests check that it still agrees with the exhaustive reference — assignments and
failures — on workloads where apps have many times more instances than there are cells (tight and
roomy clusters, several zones and cell shapes, prefill of the very apps being started, per-index sizes,
many tasks, large starting weights under which a cell with more instances can win), and that the number
of cells it scores exactly stays small per placement.
"""

from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import schedule
from placement.cell_offer import CellOffer, Resources, RunningInstance
from placement.strategies import diego_fast
from placement.testing import lrp_start, task_start
from placement.types import SchedulerConfig
from tests.support.engine_workloads import diego_workloads as small_workloads

GUIDS = [f"app-{i}" for i in range(4)]


def agree(cells, lrps, tasks=(), **config):
    fast = schedule(cells, lrps, tasks, SchedulerConfig(engine="fast", **config))
    reference = schedule(cells, lrps, tasks, SchedulerConfig(engine="reference", **config))
    assert fast.lrp_assignments == reference.lrp_assignments
    assert fast.task_assignments == reference.task_assignments
    assert fast.failures == reference.failures
    return fast


def cell(i: int, zone: str, memory: int, disk: int, containers: int, prefill=(), **extra) -> CellOffer:
    used_m = sum(p.memory_mb for p in prefill)
    used_d = sum(p.disk_mb for p in prefill)
    return CellOffer(
        f"cell-{i}",
        zone,
        Resources(memory, disk, containers),
        Resources(memory - used_m, disk - used_d, containers - len(prefill)),
        lrps=list(prefill),
        **extra,
    )


@st.composite
def large_app_workloads(draw):
    zones = [f"z{i}" for i in range(draw(st.integers(1, 3)))]
    shape = draw(st.sampled_from(["uniform", "uniform", "two", "mixed"]))
    cells = []
    for i in range(draw(st.integers(3, 20))):
        if shape == "uniform":
            memory, disk, containers = 2048, 4096, 60
        elif shape == "two":
            memory, disk, containers = (2048, 4096, 60) if i % 2 else (4096, 4096, 120)
        else:
            memory = draw(st.sampled_from([1024, 2048, 4096]))
            disk = draw(st.sampled_from([2048, 4096]))
            containers = draw(st.sampled_from([20, 60, 250]))
        prefill = []
        for k in range(draw(st.integers(0, 6))):
            size = draw(st.sampled_from([16, 64]))
            prefill.append(RunningInstance(draw(st.sampled_from(GUIDS)), 1000 + 10 * i + k, size, size))
        zone = zones[i % len(zones)] if shape == "uniform" else draw(st.sampled_from(zones))
        stacks = ("cflinuxfs4",) if draw(st.integers(0, 5)) else ("other",)
        cells.append(cell(i, zone, memory, disk, containers, prefill, stacks=stacks,
                          starting_containers=draw(st.integers(0, 2))))
    lrps = []
    for app in range(draw(st.integers(1, 3))):
        count = draw(st.integers(50, 200))
        memory = draw(st.sampled_from([8, 16, 32, 64, 128]))
        disk = draw(st.sampled_from([8, 32, 64]))
        varied = draw(st.booleans())  # a few indices ask for more: sizes differ within one process
        lrps += [lrp_start(GUIDS[app], index, memory * (3 if varied and index % 7 == 3 else 1), disk,
                          total_instances=count)
                 for index in range(count)]
    tasks = [task_start(f"task-{t}", draw(st.sampled_from([8, 32])), 8)
             for t in range(draw(st.sampled_from([0, 0, 5, 60])))]
    config = dict(
        starting_container_weight=draw(st.sampled_from([0.25, 0.25, 0.0, 2.0, 40.0])),
        bin_pack_first_fit_weight=draw(st.sampled_from([0.0, 0.0, 0.0, 0.3])),
        max_inflight_starts=draw(st.sampled_from([0, 0, 0, 400])),
    )
    return cells, lrps, tasks, config


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(large_app_workloads())
def test_fast_equals_reference_when_apps_are_much_larger_than_the_cluster(workload):
    cells, lrps, tasks, config = workload
    agree(cells, lrps, tasks, **config)


# The threshold below which a level is scored directly only decides how the winner is searched for, never
# which cell wins: at one extreme every search gives up at once (levels built from the counts on demand,
# the level-0 cells materialised, every lowest level scored directly), at the other every level is.
EXTREMES = pytest.mark.parametrize("direct", [-(10**9), 10**9], ids=["always-give-up", "always-direct"])


@EXTREMES
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(workload=large_app_workloads())
def test_every_search_path_agrees_with_the_reference_on_large_apps(direct, workload):
    cells, lrps, tasks, config = workload
    with patch.object(diego_fast, "DIRECT", direct):
        agree(cells, lrps, tasks, **config)


@EXTREMES
@settings(max_examples=40, deadline=None)
@given(workload=small_workloads())
def test_every_search_path_agrees_with_the_reference_on_small_tight_workloads(direct, workload):
    with patch.object(diego_fast, "DIRECT", direct):
        agree(workload.cells, workload.lrps, workload.tasks, **workload.config)


def test_five_apps_of_two_hundred_instances_on_twenty_cells_in_three_zones():
    prefill = {i: [RunningInstance("app-0", 500 + i, 64, 64)] * (i % 3) for i in range(20)}
    cells = [cell(i, f"z{i % 3}", 8192, 16384, 250, prefill[i]) for i in range(20)]
    lrps = [
        lrp_start(f"app-{a}", i, 32 * (a + 1), 32, total_instances=200) for a in range(5) for i in range(200)
    ]
    result = agree(cells, lrps)
    assert result.failures == [] and len(result.lrp_assignments) == 1000
    # Diego's spread, for the apps not prefilled: zones within one instance of each other, and so are the
    # cells of a zone.
    for a in range(1, 5):
        per_cell = {f"cell-{i}": 0 for i in range(20)}
        for assignment in result.lrp_assignments:
            if assignment.process_guid == f"app-{a}":
                per_cell[assignment.cell_id] += 1
        per_zone = [[n for c, n in per_cell.items() if int(c[5:]) % 3 == z] for z in range(3)]
        assert max(map(sum, per_zone)) - min(map(sum, per_zone)) <= 1
        assert all(max(zone) - min(zone) <= 1 for zone in per_zone)


def test_large_apps_on_a_cluster_that_overflows_fail_like_the_reference():
    cells = [cell(i, f"z{i % 2}", 2048 if i % 4 else 4096, 4096, 100) for i in range(12)]
    lrps = [lrp_start(f"app-{a}", i, (64, 128, 256)[a % 3], 64, total_instances=150)
            for a in range(4) for i in range(150)]
    result = agree(cells, lrps)
    assert result.failures and result.lrp_assignments


def test_a_large_starting_weight_lets_a_cell_with_more_instances_win():
    # 40 × starting containers outweighs the 1000 of an extra instance after 25 starts: the engine must
    # look past the cells with the fewest instances of the app.
    cells = [cell(i, "z0", 8192, 8192, 250, starting_containers=30 * (i == 0)) for i in range(6)]
    lrps = [lrp_start("app-0", i, 16, 16) for i in range(120)] + [
        lrp_start("app-1", i, 16, 16) for i in range(60)
    ]
    agree(cells, lrps, starting_container_weight=40.0)


def test_many_tasks_per_cell_agree():
    cells = [
        cell(i, f"z{i % 3}", 4096, 4096, 250, tasks=[f"old-{i}-{k}" for k in range(i % 4)]) for i in range(15)
    ]
    tasks = [task_start(f"task-{t}", (16, 64)[t % 2], 16) for t in range(400)]
    lrps = [lrp_start("app-0", i, 32, 32) for i in range(100)]
    agree(cells, lrps, tasks)


def test_cells_scored_per_placement_stay_few_for_apps_larger_than_the_cluster(monkeypatch):
    """Placing apps of 1,000 instances on 90 cells must not score every cell holding the app."""
    scored = 0
    real = diego_fast.lrp_score

    def counting(*args):
        nonlocal scored
        scored += 1
        return real(*args)

    monkeypatch.setattr(diego_fast, "lrp_score", counting)
    cells = [cell(i, f"z{i % 3}", 32 * 1024, 64 * 1024, 250) for i in range(90)]
    lrps = [lrp_start(f"app-{a}", i, (128, 256, 512)[a % 3], 128) for a in range(8) for i in range(1000)]
    result = schedule(cells, lrps, [], SchedulerConfig(engine="fast"))
    placed = len(result.lrp_assignments)
    assert placed > 5000
    assert scored < 8 * placed  # the level scan: a handful per placement, not one per cell holding the app


def test_float_near_ties_resolve_like_the_reference_in_every_search_path():
    """Two states whose load keys differ in the last bit while their exact scores are equal.

    Free (memory, disk) (19, 32) and (13, 38) of 100/100 are the same load mathematically; in floats the
    second's key is one ulp lower, but placing 1 MB scores both alike, so the reference takes the first
    cell met. Both the load-order scan (app absent) and the direct level search (app on every cell,
    with more instances on a third cell) must look past the lowest key to find it.
    """
    def prefilled(i, free_m, free_d, app_instances):
        prefill = [RunningInstance("app-0", 10 * i + k, 0, 0) for k in range(app_instances)]
        prefill.append(RunningInstance("old", 10 * i + 9, 100 - free_m, 100 - free_d))
        prefill += [RunningInstance("old", 10 * i + 5 + k, 0, 0) for k in range(4 - app_instances)]
        return cell(i, "z0", 100, 100, 10, prefill)

    for holds, others, others_hold in ((0, 1, 0), (0, 10, 0), (0, 10, 3), (1, 1, 3)):
        # app absent: the plain scan; app on a loaded cell only: the scan by level, or (few cells at the
        # lowest level) the direct search; app on every cell: the direct search of level 1.
        cells = [prefilled(0, 19, 32, holds), prefilled(1, 13, 38, holds)]
        cells += [prefilled(2 + i, 5, 5, others_hold if i == 0 else 0) for i in range(others)]
        result = agree(cells, [lrp_start("app-0", 7, 1, 1)])
        assert [a.cell_id for a in result.lrp_assignments] == ["cell-0"]
