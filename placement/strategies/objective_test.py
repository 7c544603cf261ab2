import pytest

from placement.testing import lrp_start, task_start

from ..cell_offer import CellOffer, Resources, RunningInstance
from ..scheduler import schedule
from ..state import AuctionState
from ..types import SchedulerConfig
from . import objective as module
from .objective import FAST, NAME, REFERENCE

ENGINES = ("fast", "reference")


def cell(cell_id, zone, memory=4096, disk=8192, containers=100, avail_memory=None, **kw):
    return CellOffer(cell_id, zone, Resources(memory, disk, containers),
                Resources(memory if avail_memory is None else avail_memory, disk, containers), **kw)


def run(cells, lrps=(), tasks=(), engine="fast", strategy=NAME):
    return schedule(cells, lrps, tasks, SchedulerConfig(strategy=strategy, engine=engine))


def placed(result):
    return {(a.process_guid, a.index): a.cell_id for a in result.lrp_assignments}


def test_module_exports_two_distinct_pickers():
    assert NAME == "objective"
    assert FAST is not REFERENCE
    assert not issubclass(FAST, REFERENCE) and not issubclass(REFERENCE, FAST)


@pytest.mark.parametrize("engine", ENGINES)
def test_four_zones_app_zero_instance_zero_ranks_zones_3_2_1_4(engine):
    # One cell per zone; knock out each winner in turn (zones stay, so numbering and azs stay) and the
    # next choice must be the next zone in the ranking.
    ranking = []
    blocked: set[str] = set()
    for _ in range(4):
        cells = [cell(f"cell-{z}", f"z{z}", avail_memory=0 if f"cell-{z}" in blocked else None)
                 for z in (1, 2, 3, 4)]
        winner = placed(run(cells, [lrp_start("app-0", 0, 256, 256)], engine=engine))[("app-0", 0)]
        ranking.append(int(winner[-1]))
        blocked.add(winner)
    assert ranking == [3, 2, 1, 4]


@pytest.mark.parametrize("engine", ENGINES)
def test_zones_are_numbered_in_sorted_order_of_their_names(engine):
    # Input order d, a, c, b: numbering is a=1, b=2, c=3, d=4, so app-0/0 goes to zone "c".
    cells = [cell(f"cell-{z}", z) for z in "dacb"]
    assert placed(run(cells, [lrp_start("app-0", 0, 256, 256)], engine=engine)) == {("app-0", 0): "cell-c"}


@pytest.mark.parametrize("engine", ENGINES)
def test_instances_of_an_app_go_round_the_zones(engine):
    cells = [cell(f"cell-{z}", f"z{z}") for z in (1, 2, 3, 4)]
    result = run(cells, [lrp_start("app-0", i, 256, 256) for i in range(5)], engine=engine)
    assert placed(result) == {("app-0", 0): "cell-3", ("app-0", 1): "cell-2", ("app-0", 2): "cell-1",
                              ("app-0", 3): "cell-4", ("app-0", 4): "cell-3"}


@pytest.mark.parametrize("engine", ENGINES)
def test_the_highest_value_among_feasible_cells_wins(engine):
    cells = [cell("big-but-wrong-stack", "z", memory=9000, stacks=("other",)),
             cell("big-but-full", "z", memory=8000, avail_memory=100),
             cell("small", "z", memory=1000), cell("medium", "z", memory=2000)]
    result = run(cells, [lrp_start("app", 0, 256, 256, objective="r.AvailableMemoryMB")], engine=engine)
    assert placed(result) == {("app", 0): "medium"}


@pytest.mark.parametrize("engine", ENGINES)
def test_ties_go_to_the_first_cell_in_input_order(engine):
    cells = [cell("b", "z2"), cell("a", "z1"), cell("c", "z1")]
    assert placed(run(cells, [lrp_start("app", 0, 1, 1, objective="1")], engine=engine)) == {("app", 0): "b"}


@pytest.mark.parametrize("engine", ENGINES)
def test_values_follow_the_reservations_of_the_batch(engine):
    # Most free memory first, 1000 MB each: a (3000 free) -> a (2000 > b's 1500) -> b (1500 > a's 1000).
    cells = [cell("a", "z", memory=3000), cell("b", "z", memory=1500)]
    lrps = [lrp_start("app", i, 1000, 1, objective="r.AvailableMemoryMB") for i in range(3)]
    assert placed(run(cells, lrps, engine=engine)) == {("app", 0): "a", ("app", 1): "a", ("app", 2): "b"}


@pytest.mark.parametrize("engine", ENGINES)
def test_running_app_ids_count_prefill_and_earlier_placements_of_the_batch(engine):
    # Fewest instances of this app first: "a" already runs web-7's AppID 7 (from another guid with the
    # same trailing number), so the first instance goes to b, the second to c, the third to a or b (a
    # holds 1 and b holds 1: the first in input order, a).
    cells = [cell("a", "z", lrps=[RunningInstance("api-7", 0)]), cell("b", "z"), cell("c", "z")]
    lrps = [lrp_start("web-7", i, 1, 1, objective="-count(ai.AppID, r.RunningAppIDs)") for i in range(3)]
    assert placed(run(cells, lrps, engine=engine)) == {
        ("web-7", 0): "b",
        ("web-7", 1): "c",
        ("web-7", 2): "a",
    }


def pick_zone_of(total_expr):
    """An objective that prefers the zone whose number equals `total_expr` (zones 1..6)."""
    return f"-(r.AvailZoneNumber - {total_expr}) * (r.AvailZoneNumber - {total_expr})"


@pytest.mark.parametrize("engine", ENGINES)
def test_total_instances_is_the_batch_plus_what_runs_when_not_given(engine):
    cells = [cell(f"cell-{z}", f"z{z}") for z in range(1, 7)]
    cells[0].lrps.append(RunningInstance("app", 9))  # one instance already running
    objective = pick_zone_of("ai.TotalInstances")
    lrps = [lrp_start("app", i, 1, 1, objective=objective) for i in range(3)]  # 3 in the batch
    result = run(cells, lrps, engine=engine)
    assert set(placed(result).values()) == {"cell-4"}  # 3 + 1 = 4, and it stays 4 while placing
    given_total = [lrp_start("app", 0, 1, 1, objective=objective, total_instances=6)]
    assert placed(run(cells, given_total, engine=engine)) == {("app", 0): "cell-6"}


@pytest.mark.parametrize("engine", ENGINES)
def test_source_blob_is_counted_in_cached_blobs(engine):
    cells = [cell("a", "z"), cell("b", "z", cached_blobs=frozenset({"droplet-1"})), cell("c", "z")]
    objective = "count(ai.AppSourceBlobID, r.CachedBlobIDs)"
    with_blob = [lrp_start("app", 0, 1, 1, objective=objective, source_blob="droplet-1")]
    without = [lrp_start("app", 0, 1, 1, objective=objective)]
    assert placed(run(cells, with_blob, engine=engine)) == {("app", 0): "b"}
    assert placed(run(cells, without, engine=engine)) == {("app", 0): "a"}


@pytest.mark.parametrize("engine", ENGINES)
def test_tasks_are_instance_zero_of_an_app_named_by_the_task_guid(engine):
    # Default preset, AppID 1 from "migrate-1": (0 + 1 + zone) mod 4 + 1 is highest in zone 2.
    cells = [cell(f"cell-{z}", f"z{z}") for z in (1, 2, 3, 4)]
    result = run(cells, tasks=[task_start("migrate-1", 64, 64)], engine=engine)
    assert [(t.task_guid, t.cell_id) for t in result.task_assignments] == [("migrate-1", "cell-2")]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_preset_name_and_its_expression_place_alike(engine):
    cells = [cell(f"cell-{z}", f"z{z}", memory=1024 * z) for z in (1, 2, 3)]
    lrps = [lrp_start(f"app-{n}", i, 128, 128) for n in range(3) for i in range(3)]
    named = [lrp_start(x.process_guid, x.index, 128, 128, objective="diego-blog") for x in lrps]
    assert run(cells, lrps, engine=engine) == run(cells, named, engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_objective_that_does_not_parse_fails_only_its_lrp(engine):
    cells = [cell("a", "z")]
    lrps = [lrp_start("bad", 0, 1, 1, objective="ai.AppID mod r.AvailZoneNumber"), lrp_start("good", 0, 1, 1)]
    result = run(cells, lrps, engine=engine)
    assert placed(result) == {("good", 0): "a"}
    [failure] = result.failures
    assert (failure.process_guid, failure.index) == ("bad", 0)
    assert failure.error == "objective: column 14: mod needs a constant modulus (numbers and azs only)"


@pytest.mark.parametrize("engine", ENGINES)
def test_nothing_feasible_reports_diegos_error(engine):
    cells = [cell("a", "z", memory=100)]
    [failure] = run(cells, [lrp_start("app", 0, 512, 1)], engine=engine).failures
    assert failure.error == "insufficient resources: memory"
    assert failure.detail == "0/1 cells fit: 1 insufficient memory (largest free 100 MB, need 512)"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_per_lrp_override_uses_the_objective_under_another_cluster_strategy(engine):
    cells = [cell("small", "z", memory=1000), cell("big", "z", memory=2000)]
    lrps = [lrp_start("app", 0, 100, 1, strategy=NAME, objective="-r.AvailableMemoryMB")]
    assert placed(run(cells, lrps, engine=engine, strategy="diego")) == {("app", 0): "small"}


@pytest.mark.parametrize("engine", ENGINES)
def test_request_filters_hold_and_follow_reservations(engine):
    # Only "b" has a free ingress IP, and only one: the second instance that needs one fails.
    cells = [cell("a", "z", memory=9000), cell("b", "z", ingress_ips=["10.0.0.1"])]
    lrps = [lrp_start("app", i, 1, 1, ingress_ip=True, objective="r.AvailableMemoryMB") for i in range(2)]
    result = run(cells, lrps, engine=engine)
    assert placed(result) == {("app", 0): "b"}
    assert [(f.process_guid, f.index) for f in result.failures] == [("app", 1)]


def test_each_distinct_objective_is_parsed_once_per_auction(monkeypatch):
    calls = []
    real = module.compile_objective
    monkeypatch.setattr(module, "compile_objective", lambda text: calls.append(text) or real(text))
    cells = [cell("a", "z")]
    lrps = [
        lrp_start(f"app-{i}", 0, 1, 1, objective="r.AvailableMemoryMB" if i % 2 else None) for i in range(6)
    ]
    for engine in ENGINES:
        calls.clear()
        run(cells, lrps, engine=engine)
        assert sorted(calls, key=str) == [None, "r.AvailableMemoryMB"]


def test_total_instances_without_a_scheduler_counts_the_item_itself():
    state = AuctionState([cell("a", "z", lrps=[RunningInstance("app", 5)])], SchedulerConfig(strategy=NAME))
    picker = REFERENCE(state)
    assert picker.lrp_facts(lrp_start("app", 0, 1, 1)).total_instances == 2.0


# --- fast == reference ------------------------------------------------------------------------------------


def same_results(cells, lrps, tasks=()):
    fast = run(cells, lrps, tasks, engine="fast")
    reference = run(cells, lrps, tasks, engine="reference")
    assert fast == reference
    return fast


def test_fast_equals_reference_on_a_hand_made_mixed_workload():
    cells = [cell(f"cell-{i}", f"z{i % 3}", memory=2048 + 512 * i, disk=4096,
                  cached_blobs=frozenset({"d1"} if i % 2 else ()),
                  lrps=[RunningInstance("web-1", 9)] if i == 4 else [])
             for i in range(8)]
    lrps = [lrp_start("web-1", i, 256, 512, source_blob="d1") for i in range(6)]
    lrps += [lrp_start("worker", i, 700, 100, objective="r.AvailableDiskMB / (ai.RequiredDiskMB + 1)")
             for i in range(5)]
    lrps += [lrp_start("cache-2", i, 1500, 100, objective="-r.AvailableMemoryMB mod 1000") for i in range(4)]
    lrps += [lrp_start("spread-3", i, 10, 10, objective=SPREAD) for i in range(12)]
    tasks = [task_start(f"task-{i}", 300, 300) for i in range(3)]
    result = same_results(cells, lrps, tasks)
    assert len(result.lrp_assignments) + len(result.task_assignments) > 10


SPREAD = "r.AvailZoneNumber / 10 - count(ai.AppID, r.RunningAppIDs)"  # fewest of the app, then zone
