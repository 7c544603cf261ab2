"""deploy/rollout_wait.py: following a rollout to completed (0), failed or rolled back (1, with the BBS's
reason), a canary's pause (0, saying how to go on), someone else's change, and a deadline."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .cli_style import FAILURE
from .rollout_wait import REVERT_GRACE_S, UNREACHABLE_GIVE_UP_S, wait_rollout

STARTED = {"process_guid": "web", "kind": "update", "from_version": 1, "to_version": 2, "state": "running",
           "done": 0, "total": 3, "max_in_flight": 1, "auto_revert": True, "canary": False, "reason": None,
           "started_at": "2026-01-01T00:00:00Z"}


def later(**changes: Any) -> dict[str, Any]:
    return {**STARTED, **changes}


class Script:
    """get_rollout() answers these in turn (the last one for good); a clock that the sleeps advance."""

    def __init__(self, answers: Iterable[dict[str, Any] | Exception | None]) -> None:
        self.answers = list(answers)
        self.now = 0.0
        self.asked = 0

    def get_rollout(self, guid: str) -> dict[str, Any] | None:
        assert guid == "web"
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def follow(self, started: dict[str, Any] = STARTED, **options: Any):
        seen: list[dict[str, Any]] = []
        outcome = wait_rollout(self, "web", started, clock=lambda: self.now, sleep=self.sleep,
                               on_progress=seen.append, **options)
        return outcome, seen


def test_a_completed_rollout_is_success_and_its_progress_is_shown() -> None:
    outcome, seen = Script([later(done=1), later(done=2), later(done=3, state="completed")]).follow()
    assert outcome.code == 0 and outcome.message == "web: version 2 rolled out to 3/3 instance(s)"
    assert [r["done"] for r in seen] == [1, 2, 3]


def test_a_rolled_back_rollout_fails_with_the_reason() -> None:
    outcome, _ = Script([later(done=1), later(state="rolling_back", reason="crashed: exit 1"),
                         later(state="rolled_back", reason="crashed: exit 1")]).follow()
    assert outcome.code == FAILURE
    assert outcome.message == "web: version 2 failed and was rolled back to version 1: crashed: exit 1"


def test_a_rollback_the_bbs_starts_as_a_rollout_of_its_own_is_followed_to_its_end() -> None:
    back = later(kind="rollback", from_version=2, to_version=1, started_at="2026-01-01T00:01:00Z",
                 reason="instance 0 never became healthy")
    outcome, _ = Script([later(done=1), back,
                         back | {"state": "completed", "done": 3}]).follow()
    assert outcome.code == FAILURE
    assert outcome.message == ("web: version 2 failed and was rolled back to version 1: "
                               "instance 0 never became healthy")


def test_a_failed_rollout_without_rollback_fails_with_the_reason() -> None:
    outcome, _ = Script([later(state="failed", reason="no cell has 4096 MB free")]).follow()
    assert (outcome.code, outcome.message) == (
        FAILURE, "web: rollout of version 2 failed: no cell has 4096 MB free")


def test_a_canary_at_its_pause_is_success_saying_how_to_go_on() -> None:
    canary = later(canary=True)
    outcome, _ = Script([canary | {"state": "paused", "done": 1, "reason": "canary"}]).follow(canary)
    assert outcome.code == 0 and "`vendue rollout resume web` continues" in outcome.message


def test_a_pause_for_a_failure_without_rollback_fails_at_once() -> None:
    script = Script([later(state="paused", auto_revert=False, reason="instance 1 crashed")])
    outcome, _ = script.follow(later(auto_revert=False))
    assert outcome.code == FAILURE and "paused at 0/3: instance 1 crashed" in outcome.message
    assert script.asked == 1


def test_a_pause_with_rollback_on_waits_for_the_rollback() -> None:
    paused = later(state="paused", reason="instance 1 crashed")
    outcome, _ = Script([paused, paused, later(state="rolled_back", reason="instance 1 crashed")]).follow()
    assert outcome.code == FAILURE and "rolled back to version 1" in outcome.message


def test_a_pause_with_rollback_on_that_lasts_is_reported_after_a_grace() -> None:
    script = Script([later(state="paused", reason="paused by an operator")])
    outcome, _ = script.follow()
    assert outcome.code == FAILURE and "paused by an operator" in outcome.message
    assert REVERT_GRACE_S <= script.now < REVERT_GRACE_S + 1


def test_another_change_ends_the_wait() -> None:
    other = later(to_version=3, started_at="2026-01-01T00:02:00Z")
    outcome, _ = Script([later(done=1), other]).follow()
    assert outcome.code == FAILURE and "superseded by another change" in outcome.message


def test_a_deadline_ends_the_wait_saying_where_it_was() -> None:
    script = Script([later(done=1)])
    outcome, _ = script.follow(timeout=3.0)
    assert outcome.code == FAILURE
    assert outcome.message.startswith("web: rollout still running after 3s at 1/3")
    assert 3.0 <= script.now <= 3.5


def test_a_restart_and_an_undo_say_what_they_did() -> None:
    restart = later(kind="restart", from_version=2, to_version=2)
    outcome, _ = Script([restart | {"state": "completed", "done": 3}]).follow(restart)
    assert outcome.message == "web: restarted 3/3 instance(s)"
    undo = later(kind="rollback", from_version=2, to_version=1)
    outcome, _ = Script([undo | {"state": "completed", "done": 3}]).follow(undo)
    assert outcome.message == "web: rolled back to version 1 (3/3 instance(s))"


def test_a_bbs_away_for_a_moment_is_waited_out_and_one_gone_for_good_is_not() -> None:
    away = ConnectionError("refused")
    outcome, _ = Script([later(done=1), away, away, later(state="completed", done=3)]).follow(
        transient=(ConnectionError,))
    assert outcome.code == 0
    script = Script([later(done=1), away])
    try:
        script.follow(transient=(ConnectionError,))
    except ConnectionError:
        assert script.now >= UNREACHABLE_GIVE_UP_S
    else:
        raise AssertionError("expected the wait to give up on a BBS gone for good")
