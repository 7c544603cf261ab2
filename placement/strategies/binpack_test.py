from collections import Counter

from placement.testing import lrp_start, task_start
from tests.support.engine_workloads import make_cell, placements

from ..cell_offer import RunningInstance
from ..scheduler import schedule
from ..types import SchedulerConfig
from .binpack import NAME

ENGINES = ("fast", "reference")


def run(cells, lrps=(), tasks=(), engine="fast"):
    return schedule(cells, lrps, tasks, SchedulerConfig(strategy=NAME, engine=engine))


def test_fills_cells_in_input_order_within_a_zone():
    cells = [make_cell(f"c{i}", memory_mb=1024) for i in range(3)]
    lrps = [lrp_start(f"app{a}", i, 256, 1) for a in range(2) for i in range(4)]
    for engine in ENGINES:
        result = run(cells, lrps, engine=engine)
        assert Counter(placements(result).values()) == {"c0": 4, "c1": 4}


def test_keeps_zones_balanced_while_packing():
    # cells interleaved across zones; a first fit that ignored zones would put all 4 on z0's cells
    cells = [make_cell("a0", "z0"), make_cell("b0", "z1"), make_cell("a1", "z0"), make_cell("b1", "z1")]
    lrps = [lrp_start("web", i, 256, 1) for i in range(6)]
    for engine in ENGINES:
        result = run(cells, lrps, engine=engine)
        assert placements(result) == {f"web/{i}": ("a0" if i % 2 == 0 else "b0") for i in range(6)}


def test_zone_balance_counts_prefilled_instances_of_the_process():
    busy = make_cell("a0", "z0", memory_mb=4096)
    busy.lrps = [RunningInstance("web", 9, 256, 1), RunningInstance("web", 8, 256, 1)]
    cells = [busy, make_cell("b0", "z1")]
    for engine in ENGINES:
        result = run(cells, [lrp_start("web", i, 256, 1) for i in range(3)], engine=engine)
        assert placements(result) == {"web/0": "b0", "web/1": "b0", "web/2": "a0"}


def test_a_fuller_zone_only_when_the_emptier_has_no_room():
    cells = [make_cell("a0", "z0", memory_mb=512), make_cell("b0", "z1", memory_mb=4096)]
    lrps = [lrp_start("web", i, 512, 1) for i in range(4)]
    for engine in ENGINES:
        result = run(cells, lrps, engine=engine)
        assert placements(result) == {"web/0": "a0", "web/1": "b0", "web/2": "b0", "web/3": "b0"}


def test_tasks_first_fit_in_input_order():
    cells = [make_cell("z1-cell", "z1", memory_mb=256), make_cell("z0-cell", "z0"), make_cell("other", "z0")]
    tasks = [task_start(f"t{i}", 200, 1) for i in range(3)]
    for engine in ENGINES:
        # no zone balance for tasks: the first cell in input order with room
        assert placements(run(cells, tasks=tasks, engine=engine)) == {
            "t0": "z1-cell", "t1": "z0-cell", "t2": "z0-cell",
        }


