from placement.rebalance import ZONE_SPREAD, Move

from .rebalance import Budget, replay, zone_outage_and_return


def move(pg: str, index: int) -> Move:
    return Move(pg, index, "a", "b", "z0", "z1", ZONE_SPREAD, "", 1.0)


def test_the_scenario_evacuates_then_rebalances_without_going_below_the_desired_count() -> None:
    report = zone_outage_and_return(0)
    skew = report["worst_zone_skew"]
    assert skew["during"] > 1 and skew["after"] <= 1, skew
    assert set(report["spread"]) == {"before", "during", "after"}
    assert report["moves"] and report["min_running_ratio_while_rebalancing"] == 1.0
    for pg, points in report["running_over_time"].items():
        desired = sum(report["spread"]["before"][pg].values())
        lost = report["spread"]["before"][pg]["z0"]
        assert points[0] == [0.0, desired - lost], (pg, points)  # the outage takes the zone's instances
        assert all(n >= desired for _, n in points[1:]), (pg, points)  # nothing below once evacuated


def test_replay_keeps_one_move_per_app_and_the_budgets() -> None:
    moves = [move("a", 0), move("a", 1), move("b", 0), move("c", 0)]
    done = replay(moves, {"a": 2, "b": 1, "c": 1}, Budget(in_flight=2, per_minute=60, move_s=2.0))
    assert done.running["a"] == [
        (0.0, 3),
        (2.0, 2),
        (2.0, 3),
        (4.0, 2),
    ]  # the second move waits for the first
    assert done.seconds == 4.0 and done.lowest_ratio == 1.0
    limited = replay(moves[2:], {"b": 1, "c": 1}, Budget(in_flight=5, per_minute=1, move_s=2.0))
    assert limited.seconds == 62.0, "one start per minute: the second starts 60 s after the first"
