from placement.batch import order_batch
from placement.testing import lrp_start, task_start
from placement.work import LRPStart


def keys(items):
    return [(i.process_guid, i.index) if isinstance(i, LRPStart) else i.task_guid for i in items]


def test_index_zero_first_by_memory_then_tasks_then_the_rest_cycling_by_load():
    lrps = [
        lrp_start("small", 0, 64, 1), lrp_start("small", 1, 64, 1), lrp_start("small", 2, 64, 1),
        lrp_start("big", 1, 512, 1), lrp_start("big", 0, 512, 1), lrp_start("big", 2, 512, 1),
        lrp_start("mid", 0, 256, 1),
    ]
    tasks = [task_start("t-small", 10, 1), task_start("t-big", 100, 1)]
    assert keys(order_batch(lrps, tasks)) == [
        ("big", 0), ("mid", 0), ("small", 0),
        "t-big", "t-small",
        ("big", 1), ("small", 1),  # cycle 1: big (2 x 512) before small (2 x 64)
        ("big", 2), ("small", 2),  # cycle 2
    ]


def test_load_is_memory_times_instances_so_many_small_instances_can_lead():
    lrps = [lrp_start("few-large", i, 300, 1) for i in range(1, 3)] + [
        lrp_start("many-small", i, 100, 1) for i in range(1, 8)
    ]
    ordered = keys(order_batch(lrps, []))
    assert ordered[:2] == [("many-small", 1), ("few-large", 1)]  # 700 MB of load against 600


def test_duplicates_are_dropped_keeping_the_first_and_equal_memory_keeps_arrival_order():
    lrps = [lrp_start("b", 0, 128, 1), lrp_start("a", 0, 128, 1), lrp_start("b", 0, 999, 1)]
    tasks = [task_start("t", 1, 1), task_start("t", 2, 1)]
    ordered = order_batch(lrps, tasks)
    assert keys(ordered) == [("b", 0), ("a", 0), "t"]
    assert ordered[0].ask.memory_mb == 128 and ordered[2].ask.memory_mb == 1


def test_with_zones_each_app_s_last_partial_round_goes_last_most_constrained_first():
    # 3 zones: a (5) = a full round 0-2 + a partial round 3-4; b (4) = 0-2 + 3; c (2) = a partial round
    # only, its index 0 already placed in step 1, so its index 1 must avoid that zone: it goes first.
    lrps = [*(lrp_start("a", i, 256, 1) for i in range(5)), *(lrp_start("b", i, 128, 1) for i in range(4)),
            *(lrp_start("c", i, 64, 1) for i in range(2))]
    assert keys(order_batch(lrps, [], zones=3)) == [
        ("a", 0), ("b", 0), ("c", 0),  # index 0 first, memory descending, as in Diego
        ("a", 1), ("b", 1), ("a", 2), ("b", 2),  # complete rounds, cycling by load
        ("c", 1), ("a", 3), ("a", 4), ("b", 3),  # partial rounds: longest first, started ones first
    ]


def test_the_partial_round_counts_the_instances_already_on_the_cells():
    lrps = [*(lrp_start("web", i, 64, 1) for i in range(2, 6)),
            *(lrp_start("api", i, 128, 1) for i in range(1, 4))]
    # nothing on the cells: web's 4 = 3 + 1 (index 5 last), api's 3 a complete round
    assert keys(order_batch(lrps, [], zones=3)) == [
        ("api", 1), ("web", 2), ("api", 2), ("web", 3), ("api", 3), ("web", 4), ("web", 5)]
    # web has 2 on the cells (6 = 3 + 3: no partial round), api 1 (4 = 3 + 1: index 3 last)
    assert keys(order_batch(lrps, [], zones=3, placed={"web": 2, "api": 1}.__getitem__)) == [
        ("api", 1), ("web", 2), ("api", 2), ("web", 3), ("web", 4), ("web", 5), ("api", 3)]


def test_one_zone_is_diego_s_order():
    lrps = [lrp_start("a", i, 256, 1) for i in range(5)] + [lrp_start("b", i, 128, 1) for i in range(4)]
    assert order_batch(lrps, [], zones=1) == order_batch(lrps, [])
    assert keys(order_batch(lrps, [])) == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2),
                                           ("a", 3), ("b", 3), ("a", 4)]
