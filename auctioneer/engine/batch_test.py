from auctioneer.engine.batch import order_batch
from auctioneer.engine.types import LRPStart, TaskStart


def keys(items):
    return [(i.process_guid, i.index) if isinstance(i, LRPStart) else i.task_guid for i in items]


def test_index_zero_first_by_memory_then_tasks_then_the_rest_cycling_by_load():
    lrps = [
        LRPStart("small", 0, 64, 1), LRPStart("small", 1, 64, 1), LRPStart("small", 2, 64, 1),
        LRPStart("big", 1, 512, 1), LRPStart("big", 0, 512, 1), LRPStart("big", 2, 512, 1),
        LRPStart("mid", 0, 256, 1),
    ]
    tasks = [TaskStart("t-small", 10, 1), TaskStart("t-big", 100, 1)]
    assert keys(order_batch(lrps, tasks)) == [
        ("big", 0), ("mid", 0), ("small", 0),
        "t-big", "t-small",
        ("big", 1), ("small", 1),  # cycle 1: big (2 x 512) before small (2 x 64)
        ("big", 2), ("small", 2),  # cycle 2
    ]


def test_load_is_memory_times_instances_so_many_small_instances_can_lead():
    lrps = [LRPStart("few-large", i, 300, 1) for i in range(1, 3)] + [LRPStart("many-small", i, 100, 1) for i in range(1, 8)]
    ordered = keys(order_batch(lrps, []))
    assert ordered[:2] == [("many-small", 1), ("few-large", 1)]  # 700 MB of load against 600


def test_duplicates_are_dropped_keeping_the_first_and_equal_memory_keeps_arrival_order():
    lrps = [LRPStart("b", 0, 128, 1), LRPStart("a", 0, 128, 1), LRPStart("b", 0, 999, 1)]
    tasks = [TaskStart("t", 1, 1), TaskStart("t", 2, 1)]
    ordered = order_batch(lrps, tasks)
    assert keys(ordered) == [("b", 0), ("a", 0), "t"]
    assert ordered[0].memory_mb == 128 and ordered[2].memory_mb == 1
