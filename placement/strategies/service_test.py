import pytest

from placement.testing import lrp_start, task_start
from tests.support.engine_workloads import make_cell, placements

from ..ask import AffinityRule, VolumeRequest
from ..cell_offer import RunningInstance, Volume
from ..scheduler import schedule
from ..state import AuctionState
from ..types import SchedulerConfig
from .service import NAME, affinity_score, service_key

ENGINES = ("fast", "reference")


def run(cells, lrps=(), tasks=(), engine="fast"):
    return schedule(cells, lrps, tasks, SchedulerConfig(strategy=NAME, engine=engine))


def holding(cell_id, *instances, **fields):
    cell = make_cell(cell_id, **fields)
    cell.lrps = list(instances)
    return cell


SVC = RunningInstance("svc", 9)
SVC_DELAYED = RunningInstance("svc", 8, delayed_shutdown=True)
OTHER = RunningInstance("other", 0)
OTHER_DELAYED = RunningInstance("other", 1, delayed_shutdown=True)


@pytest.mark.parametrize(
    ("cells", "winner"),
    [
        # fewest same-service ordinary first; then same-service delayed; then others; then others delayed
        ([holding("same", SVC), holding("same-delayed", SVC_DELAYED)], "same-delayed"),
        ([holding("same-delayed", SVC_DELAYED), holding("other", OTHER)], "other"),
        ([holding("other", OTHER), holding("other-delayed", OTHER_DELAYED)], "other-delayed"),
        ([holding("other-delayed", OTHER_DELAYED), holding("empty")], "empty"),
        ([holding("two-others", OTHER, OTHER_DELAYED), holding("same", SVC)], "two-others"),
        ([holding("b", OTHER), holding("a", OTHER)], "b"),  # ties: input order
    ],
)
def test_instance_count_order(cells, winner):
    for engine in ENGINES:
        assert placements(run(cells, [lrp_start("svc", 0, 64, 64)], engine=engine)) == {"svc/0": winner}


def test_service_key_parts():
    state = AuctionState([holding("c", SVC, SVC_DELAYED, OTHER, OTHER, OTHER_DELAYED)], SchedulerConfig())
    assert service_key(state.slots[0], lrp_start("svc", 0, 1, 1)) == (True, -0.0, 1, 1, 2, 1, 0)


def test_affinity_is_a_preference_compared_before_instance_counts():
    rules = (AffinityRule("tier=web", 2.0), AffinityRule("ssd", 1.0), AffinityRule("tier=db", -5.0))
    cells = [
        holding("db", labels={"tier": "db"}),
        holding("web-busy", SVC, labels={"tier": "web"}),
        holding("web-ssd", SVC, SVC, labels={"tier": "web", "ssd": ""}),
    ]
    state = AuctionState(cells, SchedulerConfig())
    item = lrp_start("svc", 0, 64, 64, affinity=rules)
    assert [affinity_score(s, item) for s in state.slots] == [-5.0, 2.0, 3.0]
    for engine in ENGINES:
        # the highest affinity wins despite two instances of the service already there
        assert placements(run(cells, [item], engine=engine)) == {"svc/0": "web-ssd"}
        # a repelling rule never filters: the only cell is still used
        assert placements(run(cells[:1], [item], engine=engine)) == {"svc/0": "db"}


def test_restart_stays_on_its_previous_cell_while_it_passes_the_filters():
    cells = [holding("empty"), holding("previous", SVC, OTHER), holding("small", memory_mb=32)]
    for engine in ENGINES:
        stays = lrp_start("svc", 0, 64, 64, previous_cell="previous")
        assert placements(run(cells, [stays], engine=engine)) == {"svc/0": "previous"}
        too_small = lrp_start("svc", 0, 64, 64, previous_cell="small")
        assert placements(run(cells, [too_small], engine=engine)) == {"svc/0": "empty"}
        gone = lrp_start("svc", 0, 64, 64, previous_cell="vanished")
        assert placements(run(cells, [gone], engine=engine)) == {"svc/0": "empty"}


def test_ephemeral_volume_sticks_to_the_cell_that_holds_it():
    cells = [
        holding("free", volumes=[Volume("v", 10_000, {"tier": "db"})]),
        holding("home", SVC, OTHER, volumes=[Volume("v", 100, ephemeral=True, holder="svc/1")]),
    ]
    request = (VolumeRequest("data", 1024, "tier=db", ephemeral=True),)
    lrps = [lrp_start("svc", 0, 64, 64, volumes=request), lrp_start("svc", 1, 64, 64, volumes=request)]
    for engine in ENGINES:
        # svc/1 goes home to its data though "home" is busier and its volume is smaller than asked;
        # svc/0 cannot use svc/1's volume and takes the free one
        assert placements(run(cells, lrps, engine=engine)) == {"svc/0": "free", "svc/1": "home"}


def test_tasks_go_where_fewest_tasks_then_fewest_instances():
    a = holding("a", OTHER)
    a.tasks = ["t-old"]
    cells = [a, holding("b", OTHER, OTHER), holding("c", OTHER_DELAYED, OTHER)]
    tasks = [task_start(f"t{i}", 64, 64) for i in range(3)]
    for engine in ENGINES:
        # t0: b and c have no tasks; c has fewer ordinary instances. t1: b. t2: all hold one task: a.
        assert placements(run(cells, tasks=tasks, engine=engine)) == {"t0": "c", "t1": "b", "t2": "a"}


def test_label_match_is_a_hard_filter_under_service():
    cells = [holding("plain"), holding("gpu", SVC, SVC, labels={"gpu": "true"})]
    for engine in ENGINES:
        result = run(cells, [lrp_start("svc", 0, 64, 64, labels_match="gpu=true")], engine=engine)
        assert placements(result) == {"svc/0": "gpu"}


