"""The tests' polling helper: it answers what the condition answered once it comes true, fails naming what
was expected and what was seen last, and gives up at its deadline. The clock is a fake one the helper's
sleeps advance, so no test here waits for real time or depends on how fast the machine is."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Iterator

import pytest

from tests.support import polling
from tests.support.polling import Unmet, eventually, expect, finishes, hold_for, wait_for

TIMEOUT_S = 5.0
INTERVAL_S = 1.0  # a look a second: the deadline passes after TIMEOUT_S / INTERVAL_S sleeps
LOOKS_UNTIL_DEADLINE = int(TIMEOUT_S / INTERVAL_S) + 1  # the first look, then one after each sleep


class FakeClock:
    """time.monotonic and the sleeps of the polling module: a sleep advances the clock at once."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps = 0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClock]:
    """The polling module's clocks replaced (only its own names: the event loop keeps its real clock)."""
    fake = FakeClock()
    loop_view = types.SimpleNamespace(time=fake.monotonic)
    monkeypatch.setattr(polling, "time", types.SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    monkeypatch.setattr(
        polling,
        "asyncio",
        types.SimpleNamespace(get_running_loop=lambda: loop_view, sleep=fake.async_sleep),
    )
    yield fake


def true_on_look(n: int, answer: object = "done") -> Callable[[], object]:
    """A condition false (0) on its first n-1 looks, `answer` from the n-th on."""
    looks = {"n": 0}

    def condition() -> object:
        looks["n"] += 1
        return answer if looks["n"] >= n else 0

    return condition


def test_wait_for_answers_what_the_condition_answered_once_true(clock: FakeClock) -> None:
    assert wait_for(true_on_look(3, {"state": "RUNNING"}), TIMEOUT_S, "running", interval=INTERVAL_S) == {
        "state": "RUNNING"
    }
    assert clock.sleeps == 2, "a look, then one after each sleep: true at the third"


def test_wait_for_fails_at_its_deadline_naming_the_expectation_and_the_last_seen_value(
    clock: FakeClock,
) -> None:
    looks: list[int] = []

    def condition() -> None:
        looks.append(len(looks))
        expect(False, f"{len(looks)} of 3 cells")

    with pytest.raises(AssertionError) as failed:
        wait_for(condition, TIMEOUT_S, "3 cells present", interval=INTERVAL_S)
    assert str(failed.value) == f"expected 3 cells present within 5s; saw {LOOKS_UNTIL_DEADLINE} of 3 cells"
    assert len(looks) == LOOKS_UNTIL_DEADLINE, "it gives up at the deadline, not before, not after"


class RecordingClock(FakeClock):
    def __init__(self) -> None:
        super().__init__()
        self.intervals: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.intervals.append(seconds)
        super().sleep(seconds)


def test_wait_for_looks_soon_after_a_miss_then_backs_off_to_its_longest_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = RecordingClock()
    monkeypatch.setattr(polling, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    with pytest.raises(AssertionError):
        wait_for(lambda: False, 3.0, "never")
    first, longest = polling.WAIT_FOR_INTERVAL_S, polling.WAIT_FOR_MAX_INTERVAL_S
    assert clock.intervals[0] == first
    assert clock.intervals == sorted(clock.intervals), clock.intervals
    assert clock.intervals[1] > first and max(clock.intervals) == longest, clock.intervals
    # An interval given is kept as it is, shorter or longer.
    for given in (0.02, 1.0):
        clock.intervals.clear()
        with pytest.raises(AssertionError):
            wait_for(lambda: False, 3.0, "never", interval=given)
        assert set(clock.intervals) == {given}


def test_wait_for_shows_seen_else_the_falsy_answer(clock: FakeClock) -> None:
    with pytest.raises(AssertionError, match=r"expected a lease within 5s; saw holder None$"):
        wait_for(lambda: False, TIMEOUT_S, "a lease", lambda: "holder None", interval=INTERVAL_S)
    with pytest.raises(AssertionError, match=r"expected a report within 5s; saw \[\]$"):
        wait_for(lambda: [], TIMEOUT_S, "a report", interval=INTERVAL_S)
    with pytest.raises(AssertionError, match=r"expected a pid within 5s; saw 0 \(and looking raised "):
        wait_for(lambda: 0, TIMEOUT_S, "a pid", lambda: 1 / 0, interval=INTERVAL_S)


def test_wait_for_retries_on_the_exceptions_it_is_told_and_ends_at_once_on_others(clock: FakeClock) -> None:
    def refused() -> bool:
        raise ConnectionRefusedError("nobody listens")

    with pytest.raises(AssertionError, match="saw ConnectionRefusedError: nobody listens$"):
        wait_for(refused, TIMEOUT_S, "the server", interval=INTERVAL_S, retry_on=(OSError,))
    assert clock.sleeps == LOOKS_UNTIL_DEADLINE - 1
    clock.sleeps = 0
    with pytest.raises(ConnectionRefusedError):
        wait_for(refused, TIMEOUT_S, "the server", interval=INTERVAL_S)
    assert clock.sleeps == 0, "an exception not retried on is the test's failure, at once"


async def test_eventually_awaits_an_async_condition_and_answers_its_value(clock: FakeClock) -> None:
    plain = true_on_look(2, "plain")

    async def answered() -> object:
        return plain()

    assert await eventually(answered, TIMEOUT_S, "an answer", interval=INTERVAL_S) == "plain"
    assert await eventually(true_on_look(1, 7), TIMEOUT_S, "seven", interval=INTERVAL_S) == 7
    assert clock.sleeps == 1


async def test_eventually_fails_at_its_deadline_naming_the_expectation_and_the_last_seen_value(
    clock: FakeClock,
) -> None:
    seen = {"running": 0}

    def two_running() -> bool:
        seen["running"] += 1  # what a test would read from the component it waits on
        return False

    with pytest.raises(AssertionError) as failed:
        await eventually(two_running, TIMEOUT_S, "two running", lambda: seen, interval=INTERVAL_S)
    assert str(failed.value) == f"expected two running within 5s; saw {{'running': {LOOKS_UNTIL_DEADLINE}}}"
    assert clock.sleeps == LOOKS_UNTIL_DEADLINE - 1


def test_expect_answers_ok_or_raises_unmet_with_what_was_seen() -> None:
    assert expect({"state": "DONE"}, "unused") == {"state": "DONE"}
    with pytest.raises(Unmet, match="^state PENDING$"):
        expect(False, "state PENDING")
    assert issubclass(Unmet, AssertionError), "raised outside a wait it is a plain assertion failure"


def test_hold_for_passes_while_true_and_fails_naming_what_broke(clock: FakeClock) -> None:
    hold_for(lambda: True, TIMEOUT_S, "the same instances", interval=INTERVAL_S)
    assert clock.sleeps == LOOKS_UNTIL_DEADLINE - 1, "looked at until the duration passed"

    looks = {"n": 0}

    def steady() -> object:
        looks["n"] += 1
        return expect(looks["n"] < 3, "a duplicate on cell-2")  # broken at the third look

    with pytest.raises(AssertionError) as failed:
        hold_for(steady, TIMEOUT_S, "no duplicate", interval=INTERVAL_S)
    assert str(failed.value) == "expected no duplicate to hold for 5s; it broke: a duplicate on cell-2"
    assert looks["n"] == 3


async def test_finishes_answers_what_the_await_answers_and_passes_its_own_timeout_on() -> None:
    async def answer() -> str:
        return "done"

    async def times_out_itself() -> None:
        raise TimeoutError("the request's own timeout")

    assert await finishes(answer(), TIMEOUT_S, "an answer") == "done"
    with pytest.raises(TimeoutError, match="the request's own timeout"):
        await finishes(times_out_itself(), TIMEOUT_S, "a request")


async def test_finishes_fails_naming_what_it_waited_for_once_its_bound_passes() -> None:
    never = asyncio.Event()  # nothing sets it: only the bound can end the wait
    with pytest.raises(AssertionError, match=r"^expected the stop within 0.01s; it was still waiting$"):
        await finishes(never.wait(), 0.01, "the stop")
