import pytest

from placement.testing import lrp_start, task_start
from tests.support.engine_workloads import make_cell, placements

from ..cell_offer import HostMetrics, Resources
from ..scheduler import schedule
from ..state import AuctionState
from ..types import LoadMarkConfig, SchedulerConfig
from .loadmark import NAME, CriticalLoadFilter, above_critical, host_usage, load_mark

ENGINES = ("fast", "reference")
GIB = 1024
DEFAULTS = LoadMarkConfig()


def slot_of(cell, config=SchedulerConfig()):
    return AuctionState([cell], config).slots[0]


def worked_example_host(**changes):
    fields = dict(swap_used_mb=12_000, swap_total_mb=32_000, mem_used_mb=38 * GIB, mem_total_mb=64 * GIB,
                  disk_used_mb=1_700_000, disk_total_mb=2_500_000, load5=5, cores=8)
    fields.update(changes)
    return HostMetrics(**fields)


def test_worked_example_is_83():
    slot = slot_of(make_cell("a", host=worked_example_host()))
    # swap 0.375×1 + memory 0.59375×0.2 + disk 0.68×0.5 + load 5/16 (≤ 1: counts 0) = 0.83375
    assert load_mark(slot, DEFAULTS) == pytest.approx(83.375)
    assert round(load_mark(slot, DEFAULTS)) == 83


def test_load_counts_once_above_one():
    slot = slot_of(make_cell("a", host=worked_example_host(load5=40)))  # 40 / 16 = 2.5
    assert host_usage(slot).load == 2.5
    assert load_mark(slot, DEFAULTS) == pytest.approx(83.375 + 250)


def test_coefficients_are_configurable():
    slot = slot_of(make_cell("a", host=worked_example_host()))
    config = LoadMarkConfig(swap_weight=0.0, memory_weight=1.0, disk_weight=0.0)
    assert load_mark(slot, config) == pytest.approx(59.375)


def test_fallbacks_without_host_metrics_and_without_swap():
    cell = make_cell("a", memory_mb=1000, disk_mb=2000)
    cell.available = Resources(750, 1000, 10)
    slot = slot_of(cell)
    usage = host_usage(slot)
    assert (usage.swap, usage.memory, usage.disk, usage.load) == (0.0, 0.25, 0.5, 0.0)
    assert load_mark(slot, DEFAULTS) == pytest.approx((0.25 * 0.2 + 0.5 * 0.5) * 100)


def test_batch_reservations_raise_the_mark():
    cell = make_cell("a", memory_mb=1000, disk_mb=1000, host=HostMetrics(mem_used_mb=100, disk_used_mb=0))
    state = AuctionState([cell], SchedulerConfig())
    slot = state.slots[0]
    before = host_usage(slot)
    state.reserve_lrp(slot, lrp_start("web", 0, 300, 200))
    after = host_usage(slot)
    assert (before.memory, before.disk) == (0.1, 0.0)
    assert (after.memory, after.disk) == (0.4, 0.2)


@pytest.mark.parametrize(
    ("host", "critical"),
    [
        (HostMetrics(mem_used_mb=800, mem_total_mb=1000), False),  # exactly at 80 %: not above
        (HostMetrics(mem_used_mb=810, mem_total_mb=1000), True),
        (HostMetrics(swap_used_mb=510, swap_total_mb=1000), True),
        (HostMetrics(swap_used_mb=500, swap_total_mb=1000), False),
        (HostMetrics(disk_used_mb=860, disk_total_mb=1000), True),
        (HostMetrics(load5=70, cores=2), True),  # la 17.5: mark > 300
        (HostMetrics(load5=10, cores=2), False),  # la 2.5: mark 250
    ],
)
def test_critical_marks(host, critical):
    slot = slot_of(make_cell("a", host=host))
    assert above_critical(slot, DEFAULTS) is critical
    assert CriticalLoadFilter(DEFAULTS).rejects(slot, lrp_start("web", 0, 1, 1)) is critical


def test_all_critical_fails_with_breakdown():
    cells = [make_cell("hot", host=HostMetrics(load5=100)), make_cell("small", memory_mb=100)]
    for engine in ENGINES:
        [failure] = schedule(cells, [lrp_start("web", 0, 512, 1)],
                             config=SchedulerConfig(strategy=NAME, engine=engine)).failures
        assert failure.detail == ("0/2 cells fit: 1 above critical load, "
                                  "1 insufficient memory (largest free 100 MB, need 512)")


def test_spreads_instances_then_least_loaded_wins():
    cells = [
        make_cell("busy", host=HostMetrics(load5=4)),  # la 2: mark about 200, below the critical 300
        make_cell("calm", host=HostMetrics(swap_used_mb=100, swap_total_mb=1000)),  # mark about 10
        make_cell("idle"),
    ]
    lrps = [lrp_start("web", i, 64, 64) for i in range(4)]
    for engine in ENGINES:
        result = schedule(cells, lrps, config=SchedulerConfig(strategy=NAME, engine=engine))
        # separate cells first (least loaded first), then the least loaded of all again
        assert placements(result) == {"web/0": "idle", "web/1": "calm", "web/2": "busy", "web/3": "idle"}


def test_tasks_go_to_the_least_loaded_cell_as_it_fills():
    cells = [make_cell("a", memory_mb=1000, disk_mb=1000), make_cell("b", memory_mb=1000, disk_mb=1000)]
    tasks = [task_start(f"t{i}", 100, 100) for i in range(4)]
    for engine in ENGINES:
        result = schedule(cells, tasks=tasks, config=SchedulerConfig(strategy=NAME, engine=engine))
        assert placements(result) == {"t0": "a", "t1": "b", "t2": "a", "t3": "b"}


