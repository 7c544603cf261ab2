"""`vendue up`'s restart policy on a clock of its own."""

from __future__ import annotations

from .supervision import FIRST_DELAY_S, MAX_DELAY_S, STABLE_AFTER_S, RestartPolicy


def test_a_component_that_stops_cleanly_stays_down() -> None:
    policy = RestartPolicy(["cell-0"], now=0.0)
    assert policy.exited("cell-0", 0, now=5.0) is None
    assert policy.due(now=1_000.0) == []


def within(delay: float | None, step: float) -> bool:
    """A jittered delay lies in the upper half of its step (common/retry.py's equal jitter)."""
    return delay is not None and step / 2 <= delay <= step


def test_a_failed_component_starts_again_after_a_delay_that_doubles_while_it_keeps_failing() -> None:
    policy = RestartPolicy(["bbs", "auctioneer"], now=0.0)
    now, delays = 1.0, []
    for _ in range(8):
        delay = policy.exited("bbs", -9, now)
        assert delay is not None
        delays.append(delay)
        assert policy.due(now + delay - 0.01) == [], "not before its delay"
        assert policy.due(now + delay) == ["bbs"], "the auctioneer is not touched"
        now += delay
        policy.started("bbs", now)
        now += 0.5  # fails again at once
    steps = [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    assert all(within(d, step) for d, step in zip(delays, steps, strict=True)), delays
    assert delays[0] <= FIRST_DELAY_S and max(delays) <= MAX_DELAY_S


def test_a_component_up_long_enough_starts_again_from_the_first_delay() -> None:
    policy = RestartPolicy(["bbs"], now=0.0)
    assert within(policy.exited("bbs", 1, now=1.0), 1.0)
    policy.started("bbs", now=2.0)
    assert within(policy.exited("bbs", 1, now=3.0), 2.0)
    policy.started("bbs", now=5.0)
    assert within(policy.exited("bbs", -6, now=5.0 + STABLE_AFTER_S), FIRST_DELAY_S)


def test_a_start_that_fails_is_tried_again_later() -> None:
    policy = RestartPolicy(["auctioneer"], now=0.0)
    assert within(policy.exited("auctioneer", 1, now=0.0), 1.0)
    assert policy.due(1.0) == ["auctioneer"]
    delay = policy.failed_to_start("auctioneer", now=31.0)
    assert within(delay, 2.0)
    assert policy.due(31.0 + delay - 0.01) == [] and policy.due(31.0 + delay) == ["auctioneer"]


def test_components_that_fail_together_do_not_start_again_in_step() -> None:
    names = [f"cell-{i}" for i in range(20)]
    policy = RestartPolicy(names, now=0.0)
    delays = {policy.exited(name, -9, now=1.0) for name in names}
    assert len(delays) > 1, "every component would come back at the same moment"
