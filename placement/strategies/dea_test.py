import random

from placement.testing import lrp_start, task_start
from tests.support.engine_workloads import make_cell, placements

from ..cell_offer import RunningInstance
from ..scheduler import schedule
from ..state import AuctionState
from ..types import SchedulerConfig
from .dea import NAME, StaleAdvertisementFilter, running_instances, top_half_size

ENGINES = ("fast", "reference")


def run(cells, lrps=(), tasks=(), engine="fast", seed=0, now=None):
    return schedule(cells, lrps, tasks, SchedulerConfig(strategy=NAME, engine=engine, seed=seed, now=now))


def busy_cell(cell_id, zone="z0", running=0, memory_mb=4096, tasks=0):
    cell = make_cell(cell_id, zone, memory_mb=memory_mb)
    cell.lrps = [RunningInstance(f"other-{i}", 0) for i in range(running)]
    cell.tasks = [f"task-{i}" for i in range(tasks)]
    return cell


def test_stale_advertisement_filter():
    fresh, stale, unknown = AuctionState(
        [make_cell("f", expires_at=200.0), make_cell("s", expires_at=50.0), make_cell("u")], SchedulerConfig()
    ).slots
    item = lrp_start("web", 0, 1, 1)
    now = StaleAdvertisementFilter(100.0)
    assert [now.rejects(s, item) for s in (fresh, stale, unknown)] == [False, True, False]
    assert not StaleAdvertisementFilter(None).rejects(stale, item)  # no clock: nothing is stale
    assert now.summary([stale, stale], item) == "2 stale advertisement"


def test_all_stale_fails_with_its_own_error_and_breakdown():
    cells = [make_cell("a", expires_at=50.0), make_cell("b", expires_at=60.0)]
    for engine in ENGINES:
        [failure] = run(cells, [lrp_start("web", 0, 1, 1)], engine=engine, now=100.0).failures
        assert failure.error == "found no cell with a fresh advertisement"
        assert failure.detail == "0/2 cells fit: 2 stale advertisement"
        assert run(cells, [lrp_start("web", 0, 1, 1)], engine=engine, now=None).failures == []


def test_running_instances_counts_every_app_delayed_and_tasks():
    cell = busy_cell("a", running=2, tasks=1)
    cell.lrps.append(RunningInstance("x", 0, delayed_shutdown=True))
    [slot] = AuctionState([cell], SchedulerConfig()).slots
    assert running_instances(slot) == 4


def test_narrows_to_the_zone_with_fewest_running_instances():
    # z0 holds 3 instances in total over 3 cells; z1 holds 2 on one cell: z1 wins although its cell is busier
    cells = [
        busy_cell("a", "z0", 1),
        busy_cell("b", "z0", 1),
        busy_cell("c", "z0", 1),
        busy_cell("d", "z1", 2),
    ]
    for engine in ENGINES:
        for seed in range(5):
            assert placements(run(cells, [lrp_start("web", 0, 1, 1)], engine=engine, seed=seed)) == {
                "web/0": "d"
            }


def test_zone_ties_go_to_the_first_zone_name():
    cells = [busy_cell("b", "zb", 1), busy_cell("a", "za", 1)]
    for engine in ENGINES:
        for seed in range(5):
            assert placements(run(cells, [lrp_start("web", 0, 1, 1)], engine=engine, seed=seed)) == {
                "web/0": "a"
            }


def test_zone_totals_count_only_cells_that_can_take_the_work():
    # z0's loaded cell cannot take 2 GB, so z0 counts 0 and wins over z1's 1
    cells = [busy_cell("small", "z0", 5, memory_mb=1024), busy_cell("big", "z0", 0), busy_cell("c", "z1", 1)]
    for engine in ENGINES:
        assert placements(run(cells, [lrp_start("web", 0, 2048, 1)], engine=engine)) == {"web/0": "big"}


def test_narrows_to_cells_with_fewest_instances_then_top_half_by_free_memory():
    cells = [
        busy_cell("loaded", running=1, memory_mb=8000),
        busy_cell("m1000", memory_mb=1000), busy_cell("m4000", memory_mb=4000),
        busy_cell("m3000", memory_mb=3000), busy_cell("m2000", memory_mb=2000),
    ]
    for engine in ENGINES:
        chosen = {placements(run(cells, [lrp_start("web", 0, 1, 1)], engine=engine, seed=s))["web/0"]
                  for s in range(40)}
        assert chosen == {"m4000", "m3000"}  # never the busier cell, never the bottom half


def test_draw_is_one_randrange_over_the_top_half_in_input_order():
    cells = [busy_cell(f"c{i}", memory_mb=1000 + 100 * (i % 3)) for i in range(7)]
    # free memory 1000,1100,1200,1000,1100,1200,1000 -> top ceil(7/2)=4: c2, c5 (1200), c1, c4 (1100)
    top = ["c1", "c2", "c4", "c5"]
    for engine in ENGINES:
        for seed in range(6):
            expected = top[random.Random(f"{seed}:web:0").randrange(4)]
            assert placements(run(cells, [lrp_start("web", 0, 1, 1)], engine=engine, seed=seed)) == {
                "web/0": expected
            }


def test_top_half_size_rounds_up():
    assert [top_half_size(n) for n in (1, 2, 3, 4, 5)] == [1, 1, 2, 2, 3]


def test_the_batch_counts_its_own_reservations():
    cells = [busy_cell("a0", "z0"), busy_cell("a1", "z0"), busy_cell("b0", "z1"), busy_cell("b1", "z1")]
    lrps = [lrp_start("web", i, 1, 1) for i in range(4)]
    for engine in ENGINES:
        chosen = placements(run(cells, lrps, engine=engine, seed=3))
        assert sorted(chosen.values()) == ["a0", "a1", "b0", "b1"]  # one each: zone, then cell narrowing


def test_tasks_use_the_same_steps_and_count_as_running():
    cells = [busy_cell("a", "z0", tasks=2), busy_cell("b", "z1", tasks=1)]
    tasks = [task_start("t0", 1, 1), task_start("t1", 1, 1)]
    for engine in ENGINES:
        # t0 -> z1 (1 running < 2); then both zones run 2 and the tie goes to z0
        assert placements(run(cells, tasks=tasks, engine=engine)) == {"t0": "b", "t1": "a"}


def test_seed_reproducible():
    cells = [busy_cell(f"c{i}", f"z{i % 2}") for i in range(12)]
    lrps = [lrp_start(f"app{a}", i, 64, 64) for a in range(3) for i in range(3)]
    results = {seed: placements(run(cells, lrps, seed=seed)) for seed in range(4)}
    assert results[0] == placements(run(cells, lrps, seed=0))
    assert results[0] == placements(run(cells, lrps, seed=0, engine="reference"))
    assert len({tuple(sorted(r.items())) for r in results.values()}) > 1


