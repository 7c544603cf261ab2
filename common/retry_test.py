"""The one retry policy: jittered, capped, growing, reset by a success; and tenacity driven with no real
sleep (its `sleep` hook records the waits; its clock is moved by hand where a window matters)."""

from __future__ import annotations

import itertools
import statistics

import pytest

from common import retry
from common.retry import Again, Backoff, retrying

POLICY = Backoff(first_s=0.1, max_s=5.0)


def take(delays: retry.Delays, n: int) -> list[float]:
    return list(itertools.islice(delays, n))


def test_two_sequences_of_the_same_policy_differ() -> None:
    """Processes that fail together must not retry together: the jitter is per sequence."""
    first, second = take(POLICY.delays(), 8), take(POLICY.delays(), 8)
    assert first != second
    assert sum(a != b for a, b in zip(first, second, strict=True)) >= 7, (first, second)


def test_many_processes_failing_at_once_spread_their_retries() -> None:
    """A thousand reps whose BBS restarted: their fifth retries are spread over the step's upper half."""
    fifth = [take(POLICY.delays(), 5)[-1] for _ in range(1000)]
    step = POLICY.nominal(5)  # 1.6 s
    assert min(fifth) >= step / 2 and max(fifth) <= step
    assert max(fifth) - min(fifth) > step / 3, "the retries still come in a burst"
    assert len({round(d, 3) for d in fifth}) > 300


def test_every_delay_is_in_the_upper_half_of_its_step_and_never_past_the_cap() -> None:
    for _ in range(50):
        for n, delay in enumerate(take(POLICY.delays(), 30), start=1):
            step = POLICY.nominal(n)
            assert step / 2 <= delay <= step <= POLICY.max_s, (n, delay, step)


def test_delays_grow_exponentially_on_average_until_the_cap() -> None:
    runs = [take(POLICY.delays(), 10) for _ in range(400)]
    means = [statistics.fmean(run[i] for run in runs) for i in range(10)]
    for n in range(1, 6):  # 0.1 .. 1.6 s: below the cap, each step doubles
        assert 1.7 < means[n] / means[n - 1] < 2.3, means
    assert means[-1] == pytest.approx(0.75 * POLICY.max_s, rel=0.05)  # at the cap: its upper half, on average
    assert max(max(run) for run in runs) <= POLICY.max_s


def test_a_success_starts_the_sequence_again_from_the_first_delay() -> None:
    delays = POLICY.delays()
    take(delays, 12)
    assert delays.failures == 12
    delays.reset()
    assert delays.failures == 0
    assert POLICY.first_s / 2 <= next(delays) <= POLICY.first_s


def test_a_cap_known_at_run_time_lowers_the_policy_s() -> None:
    capped = retry.LEASE.capped(2.0)  # the lease loop: at most TTL/3
    assert max(take(capped.delays(), 40)) <= 2.0
    assert POLICY.capped(100.0) == POLICY, "a cap never raises the policy's own"


def test_a_factor_other_than_two() -> None:
    sends = retry.AUCTIONEER_SENDS  # 0.1 s, times 4, at most 1 s
    assert [sends.nominal(n) for n in (1, 2, 3, 4)] == pytest.approx([0.1, 0.4, 1.0, 1.0])
    for n, delay in enumerate(take(sends.delays(), 4), start=1):
        assert sends.nominal(n) / 2 <= delay <= sends.nominal(n)


def test_a_long_outage_neither_overflows_nor_passes_the_cap() -> None:
    delays = Backoff(first_s=0.25, max_s=5.0).delays()
    for _ in range(5000):
        delay = next(delays)
    assert 2.5 <= delay <= 5.0
    for policy in (retry.REGISTRATION, retry.LEASE):  # capped lower at run time; never past their own cap
        assert max(take(policy.delays(), 2000)) <= policy.max_s < float("inf")


def test_every_named_policy_starts_below_its_cap() -> None:
    named = [v for v in vars(retry).values() if isinstance(v, Backoff)]
    assert len(named) >= 9
    assert all(0 < p.first_s <= p.max_s and p.factor > 1 for p in named), named


class Recorder:
    """tenacity's `sleep` hook: records each wait instead of sleeping it, and moves the clock by it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch | None = None) -> None:
        self.waits: list[float] = []
        self.now = 1000.0
        if monkeypatch is not None:  # tenacity's window counts on time.monotonic
            monkeypatch.setattr("tenacity.time.monotonic", lambda: self.now)

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


async def test_retrying_tries_the_given_number_of_times_with_the_policy_s_waits() -> None:
    sleep, tries = Recorder(), 0
    with pytest.raises(Again, match="still down"):
        async for attempt in retrying(POLICY, attempts=4, sleep=sleep):
            with attempt:
                tries += 1
                raise Again("still down")
    assert tries == 4 and len(sleep.waits) == 3
    for n, wait in enumerate(sleep.waits, start=1):
        assert POLICY.nominal(n) / 2 <= wait <= POLICY.nominal(n)


async def test_retrying_returns_the_first_success_and_stops_at_once_on_another_error() -> None:
    sleep, tries = Recorder(), 0

    async def flaky() -> str:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise Again("not yet")
        return "ok"

    async def run() -> str:
        async for attempt in retrying(POLICY, attempts=5, sleep=sleep):
            with attempt:
                return await flaky()
        raise AssertionError("not reached")

    assert await run() == "ok" and tries == 3 and len(sleep.waits) == 2

    with pytest.raises(ValueError):  # not in `on`: no second try
        async for attempt in retrying(POLICY, attempts=5, sleep=sleep):
            with attempt:
                raise ValueError("refused for good")
    assert len(sleep.waits) == 2


async def test_retrying_goes_on_past_its_attempts_until_its_window_has_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The BBS's start requests: `attempts` tries, and for at least the window (a standby takes the lease)."""
    sleep, tries = Recorder(monkeypatch), 0
    with pytest.raises(Again):
        async for attempt in retrying(Backoff(0.1, 1.0), attempts=2, at_least_s=5.0, sleep=sleep):
            with attempt:
                tries += 1
                raise Again
    assert tries > 2 and sum(sleep.waits[:-1]) < 5.0 <= sum(sleep.waits), sleep.waits


async def test_retrying_within_a_window_never_waits_past_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The BBS's cell probes: asked again until the window would end before the next try."""
    sleep, tries = Recorder(monkeypatch), 0
    with pytest.raises(Again):
        async for attempt in retrying(retry.CELL_PROBES, within_s=5.0, sleep=sleep):
            with attempt:
                tries += 1
                raise Again
    assert sum(sleep.waits) < 5.0 and tries == len(sleep.waits) + 1 >= 10, sleep.waits
