"""The rollout decisions (bbs/rollout.py) on plain records: moves started, ended, failed; states."""

from __future__ import annotations

import dataclasses

from .actual_set import ActualSet
from .records import CLAIMED, CRASHED, EVACUATING, ORDINARY, RUNNING, UNCLAIMED, ActualRecord
from .rollout import (
    CANARY_REASON,
    COMPLETED,
    FAILED,
    PAUSED,
    ROLLED_BACK,
    ROLLING_BACK,
    RUNNING_STATE,
    Flight,
    RolloutRecord,
    count_done,
    step,
)

G = "web"
TIMEOUT = 90.0


def row(index: int, version: int = 1, state: str = RUNNING, presence: str = ORDINARY, cell: str = "c1",
        since: float = 0.0, crash_count: int = 0, **fields: object) -> ActualRecord:
    return ActualRecord(G, index, presence, "d", state, f"g{index}-{version}-{presence}" if state != UNCLAIMED
                        else "", cell if state != UNCLAIMED else "", since=since, crash_count=crash_count,
                        version=version, **fields)  # type: ignore[arg-type]


def rollout(**fields: object) -> RolloutRecord:
    values: dict[str, object] = dict(
        process_guid=G, seq=1, kind="update", from_version=1, to_version=2, state=RUNNING_STATE, total=4,
        max_in_flight=1, auto_revert=True, canary=False, started_at=100.0, updated_at=100.0,
    )
    values.update(fields)
    return RolloutRecord(**values)  # type: ignore[arg-type]


def old_app(n: int = 4, version: int = 1) -> ActualSet:
    return ActualSet([row(i, version) for i in range(n)])


def healthy(actuals: ActualSet, n: int) -> int:
    """Indices with a RUNNING instance (of either presence): what must never drop below n."""
    return len({r.index for r in actuals if r.state == RUNNING and r.index < n})


def run_replacement(actuals: ActualSet, index: int, version: int, now: float, cell: str = "c2") -> None:
    """What the auction, the rep and the lifecycle do: the replacement claimed and RUNNING, then the old
    (EVACUATING) instance stopped and its row removed."""
    new = actuals.get(G, index)
    assert new is not None and new.state == UNCLAIMED
    actuals.replace(new, dataclasses.replace(new, state=RUNNING, cell_id=cell, instance_guid=f"n{index}",
                                             version=version, since=now))
    old = actuals.get(G, index, EVACUATING)
    assert old is not None
    actuals.remove(old)


def test_one_index_at_a_time_make_before_break_until_every_index_runs_the_new_version() -> None:
    r, actuals = rollout(), old_app()
    now = 100.0
    for expected_index in range(4):
        decided = step(r, 4, actuals, now, TIMEOUT)
        assert decided.starts == {expected_index}, f"expected index {expected_index} moved, seen {decided}"
        assert actuals.get(G, expected_index, EVACUATING) is not None, "the old instance keeps serving"
        assert healthy(actuals, 4) == 4
        assert r.state == RUNNING_STATE and r.done == expected_index
        now += 1
        assert step(r, 4, actuals, now, TIMEOUT).starts == set(), "max_in_flight 1: nothing else starts"
        run_replacement(actuals, expected_index, 2, now)
    step(r, 4, actuals, now + 1, TIMEOUT)
    assert (r.state, r.done, r.in_flight, r.finished_at) == (COMPLETED, 4, {}, now + 1)
    assert {x.version for x in actuals} == {2}


def test_max_in_flight_moves_that_many_indices_at_once() -> None:
    r, actuals = rollout(max_in_flight=3, total=10), old_app(10)
    decided = step(r, 10, actuals, 100.0, TIMEOUT)
    assert decided.starts == {0, 1, 2}
    assert healthy(actuals, 10) == 10
    run_replacement(actuals, 1, 2, 101.0)
    assert step(r, 10, actuals, 101.0, TIMEOUT).starts == {3}, "a finished move frees its slot"


def test_indices_moving_for_another_reason_count_against_max_in_flight_and_are_not_moved() -> None:
    actuals = old_app(3)
    old = actuals.get(G, 0)
    assert old is not None
    actuals.replace(old, dataclasses.replace(old, presence=EVACUATING))  # a drain's evacuation
    actuals.put(row(0, 1, state=UNCLAIMED))
    r = rollout(max_in_flight=2, total=3)
    assert step(r, 3, actuals, 100.0, TIMEOUT).starts == {1}


def test_instances_not_running_are_left_to_convergence_and_not_counted_done() -> None:
    actuals = ActualSet([row(0, 1, state=CRASHED), row(1, 1, state=UNCLAIMED), row(2, 1, state=CLAIMED)])
    r = rollout(max_in_flight=3, total=3)
    decided = step(r, 3, actuals, 100.0, TIMEOUT)
    assert decided.starts == set() and r.done == 0 and r.state == RUNNING_STATE


def test_an_index_already_on_the_new_version_is_done_without_a_move() -> None:
    actuals = ActualSet([row(0, 2), row(1, 1)])
    r = rollout(total=2)
    assert step(r, 2, actuals, 100.0, TIMEOUT).starts == {1}
    assert r.done == 1


def test_a_crashing_new_instance_abandons_its_move_and_rolls_back_by_default() -> None:
    r, actuals = rollout(), old_app()
    step(r, 4, actuals, 100.0, TIMEOUT)
    new = actuals.get(G, 0)
    assert new is not None
    actuals.replace(new, dataclasses.replace(new, state=CRASHED, crash_count=1, crash_reason="exited with 1"))
    decided = step(r, 4, actuals, 101.0, TIMEOUT)
    assert decided.reverted and r.reason == "instance 0 of version 2 crashed: exited with 1"
    assert actuals.get(G, 0, EVACUATING) is None, "the old instance is the index's again"
    back = actuals.get(G, 0)
    assert back is not None and (back.state, back.version, back.presence) == (RUNNING, 1, ORDINARY)
    assert decided.stops == [], "a crashed replacement holds no cell: nothing to stop"
    assert healthy(actuals, 4) == 4
    # Everything runs version 1 (the target while rolling back): rolled back at once.
    assert r.done == 4
    assert r.state == ROLLED_BACK and r.finished_at == 101.0


def test_rolling_back_replaces_the_indices_already_on_the_new_version() -> None:
    r, actuals = rollout(max_in_flight=2), old_app()
    step(r, 4, actuals, 100.0, TIMEOUT)
    run_replacement(actuals, 0, 2, 101.0)
    run_replacement(actuals, 1, 2, 101.0)
    step(r, 4, actuals, 102.0, TIMEOUT)  # moves 2 and 3
    new = actuals.get(G, 2)
    assert new is not None
    actuals.replace(new, dataclasses.replace(new, state=RUNNING, cell_id="c3", instance_guid="x", version=2))
    crashed = actuals.get(G, 3)
    assert crashed is not None
    actuals.replace(crashed, dataclasses.replace(crashed, crash_count=1))
    decided = step(r, 4, actuals, 103.0, TIMEOUT)
    assert r.state == ROLLING_BACK and decided.reverted
    assert [s.instance_guid for s in decided.stops] == ["x"], "a running replacement abandoned is stopped"
    assert decided.starts == {0, 1}, "the indices on version 2 move back to 1"
    assert healthy(actuals, 4) == 4


def test_with_auto_revert_off_a_failure_pauses_with_the_reason() -> None:
    r, actuals = rollout(auto_revert=False), old_app()
    step(r, 4, actuals, 100.0, TIMEOUT)
    new = actuals.get(G, 0)
    assert new is not None
    actuals.replace(new, dataclasses.replace(new, placement_error="insufficient resources: memory"))
    decided = step(r, 4, actuals, 101.0, TIMEOUT)
    assert r.state == PAUSED and r.reason is not None and "insufficient resources: memory" in r.reason
    assert decided.starts == set() and r.in_flight == {}
    assert step(r, 4, actuals, 102.0, TIMEOUT).starts == set(), "a paused rollout starts nothing"


def test_a_replacement_that_does_not_run_within_the_start_timeout_fails_the_rollout() -> None:
    r, actuals = rollout(auto_revert=False), old_app()
    step(r, 4, actuals, 100.0, TIMEOUT)
    step(r, 4, actuals, 100.0 + TIMEOUT, TIMEOUT)
    assert r.state == RUNNING_STATE, "not yet: the timeout is not past"
    step(r, 4, actuals, 100.5 + TIMEOUT, TIMEOUT)
    assert r.state == PAUSED and r.reason == "instance 0 of version 2 did not become healthy within 90s"


def test_a_failing_rollback_ends_failed() -> None:
    r = rollout(state=ROLLING_BACK, reason="instance 0 of version 2 crashed: x")
    actuals = old_app(2, version=2)
    step(r, 2, actuals, 100.0, TIMEOUT)
    new = actuals.get(G, 0)
    assert new is not None
    actuals.replace(new, dataclasses.replace(new, state=CRASHED, crash_count=1, crash_reason="boom"))
    step(r, 2, actuals, 101.0, TIMEOUT)
    assert r.state == FAILED and r.reason == "instance 0 of version 1 crashed: boom"


def test_a_restart_replaces_every_instance_running_since_before_it_began() -> None:
    r = rollout(kind="restart", from_version=1, to_version=1, auto_revert=False, max_in_flight=2, total=3)
    actuals = ActualSet([row(0, since=50.0), row(1, since=150.0), row(2, since=60.0)])
    assert step(r, 3, actuals, 200.0, TIMEOUT).starts == {0, 2}
    assert r.done == 1
    run_replacement(actuals, 0, 1, 201.0)
    run_replacement(actuals, 2, 1, 201.0)
    step(r, 3, actuals, 202.0, TIMEOUT)
    assert r.state == COMPLETED and r.done == 3


def test_a_failed_restart_pauses_even_with_auto_revert() -> None:
    r = rollout(kind="restart", from_version=1, to_version=1, auto_revert=True, total=2)
    actuals = ActualSet([row(0), row(1)])
    step(r, 2, actuals, 200.0, TIMEOUT)
    new = actuals.get(G, 0)
    assert new is not None
    actuals.replace(new, dataclasses.replace(new, state=CRASHED, crash_count=1))
    step(r, 2, actuals, 201.0, TIMEOUT)
    assert r.state == PAUSED, "a restart has no other version to go back to"


def test_a_canary_moves_one_index_then_pauses_until_resumed() -> None:
    r, actuals = rollout(canary=True, max_in_flight=3), old_app()
    assert step(r, 4, actuals, 100.0, TIMEOUT).starts == {0}
    run_replacement(actuals, 0, 2, 101.0)
    step(r, 4, actuals, 102.0, TIMEOUT)
    assert (r.state, r.reason, r.done) == (PAUSED, CANARY_REASON, 1)
    r.state, r.canary_passed, r.reason = RUNNING_STATE, True, None  # resume
    assert step(r, 4, actuals, 103.0, TIMEOUT).starts == {1, 2, 3}


def test_scaling_down_mid_rollout_forgets_the_moves_of_indices_gone() -> None:
    r, actuals = rollout(max_in_flight=4), old_app()
    step(r, 4, actuals, 100.0, TIMEOUT)
    for index in (2, 3):  # the resize removed both copies of these indices
        for x in actuals.at_index(G, index):
            actuals.remove(x)
    run_replacement(actuals, 0, 2, 101.0)
    run_replacement(actuals, 1, 2, 101.0)
    step(r, 2, actuals, 102.0, TIMEOUT)
    assert (r.state, r.total, r.done, r.in_flight) == (COMPLETED, 2, 2, {})


def test_a_lost_old_instance_ends_its_move_without_failing() -> None:
    r, actuals = rollout(), old_app(2)
    step(r, 2, actuals, 100.0, TIMEOUT)
    old = actuals.get(G, 0, EVACUATING)
    assert old is not None
    actuals.remove(old)  # its cell lost
    step(r, 2, actuals, 101.0, TIMEOUT)
    assert r.state == RUNNING_STATE and 0 not in r.in_flight


def test_zero_instances_complete_at_once() -> None:
    r = rollout(total=0)
    step(r, 0, ActualSet(), 100.0, TIMEOUT)
    assert r.state == COMPLETED


def test_a_record_survives_its_stored_form() -> None:
    r = rollout(in_flight={3: Flight(101.5, 2)}, reason="x", canary_passed=True)
    assert RolloutRecord.from_data(r.to_data()) == r
    wire = r.to_wire()
    assert wire["started_at"].startswith("1970-01-01T00:01:40") and "in_flight" not in wire


def test_count_done_needs_a_lone_running_instance_of_the_target() -> None:
    actuals = ActualSet([row(0, 2), row(1, 2, state=CLAIMED), row(2, 1), row(3, 2),
                         row(3, 1, presence=EVACUATING)])
    assert count_done(rollout(), actuals, 4) == 1


def test_a_move_failing_while_paused_is_dropped_and_the_rollout_stays_paused() -> None:
    r, actuals = rollout(), old_app(2)
    step(r, 2, actuals, 100.0, TIMEOUT)
    r.state, r.paused_from, r.reason = PAUSED, RUNNING_STATE, "paused by an operator"
    new = actuals.get(G, 0)
    assert new is not None
    actuals.replace(new, dataclasses.replace(new, state=CRASHED, crash_count=1, crash_reason="boom"))
    step(r, 2, actuals, 101.0, TIMEOUT)
    assert (r.state, r.in_flight, r.reason) == (PAUSED, {}, "instance 0 of version 2 crashed: boom")
    back = actuals.get(G, 0)
    assert back is not None and (back.version, back.state) == (1, RUNNING)
