"""The one retry policy of every component: capped exponential backoff with equal jitter, from tenacity.

A delay starts at `first_s`, grows by `factor` (2) each failure in a row up to `max_s`, and is then drawn
uniformly from its upper half: with d = min(max_s, first_s * factor ** (n - 1)) for the n-th failure in a
row, the wait is d/2 + uniform(0, d/2). The random half spreads the processes that failed together (every
rep and auctioneer when a BBS restarts, every client of a NATS server) so that they do not come back in
step; the fixed half keeps a floor, so a retry is never a tight loop. Success starts the sequence again
from `first_s`. docs/configuration.md (Retries) lists the named policies below and where each is used.

Two ways to use it:
- `retrying(policy, attempts=...)`: tenacity's AsyncRetrying, for a call tried a bounded number of times
  (or for a bounded time): `async for attempt in retrying(...): with attempt: ...`.
- `policy.delays()`: the same delays one after another, for a loop that retries for ever or schedules its
  own wake-up (the rep's outbox, a NATS connection, the lease loop): `next(delays)` after a failure,
  `delays.reset()` after a success.

What is not here: bbs/restart_policy.py's crash backoff (Diego's restart schedule for crashed instances,
a product rule with documented, deterministic steps), and polls that wait on a local condition.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, replace

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    stop_before_delay,
    stop_never,
    wait_exponential,
    wait_random_exponential,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_base


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays from `first_s`, times `factor` per failure in a row, at most `max_s`; equal jitter."""

    first_s: float
    max_s: float
    factor: float = 2.0

    def wait(self) -> wait_base:
        """The tenacity wait strategy: a fixed half and a random half of the capped exponential delay."""
        half = {"multiplier": self.first_s / 2, "max": self.max_s / 2, "exp_base": self.factor}
        return wait_exponential(**half) + wait_random_exponential(**half)

    def capped(self, max_s: float) -> Backoff:
        """The same policy with a lower cap (a site whose longest sensible wait is known only at run time)."""
        return replace(self, max_s=min(self.max_s, max_s))

    def delays(self) -> Delays:
        return Delays(self.wait())

    def nominal(self, failures: int) -> float:
        """The delay before jitter after `failures` failures in a row (the upper bound of the n-th delay)."""
        if failures < 1 or self.first_s <= 0:
            return 0.0
        exponent = failures - 1
        if self.factor > 1 and exponent > math.log(max(self.max_s, 1e-12) / self.first_s, self.factor):
            return self.max_s
        return min(self.max_s, self.first_s * self.factor**exponent)


class Delays(Iterator[float]):
    """The policy's delays for consecutive failures, drawn by tenacity's wait strategy: `next()` after each
    failure, `reset()` after a success."""

    def __init__(self, wait: wait_base) -> None:
        self._wait = wait
        self._state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]

    def __next__(self) -> float:
        delay = float(self._wait(self._state))
        self._state.attempt_number += 1
        return delay

    def reset(self) -> None:
        self._state.attempt_number = 1

    @property
    def failures(self) -> int:
        """Delays handed out since the last reset: the failures in a row."""
        return self._state.attempt_number - 1


class Again(Exception):
    """Raised inside an attempt whose outcome (not an exception) calls for another try."""


Sleep = Callable[[float], Awaitable[None]]


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)  # a retry's backoff, not synchronisation


def retrying(
    policy: Backoff,
    *,
    attempts: int | None = None,
    at_least_s: float = 0.0,
    within_s: float | None = None,
    on: type[BaseException] | tuple[type[BaseException], ...] = Again,
    sleep: Sleep | None = None,
) -> AsyncRetrying:
    """Tenacity's AsyncRetrying with the policy's waits. Tries again after an exception of a type in `on`
    (others end it at once, as they are); stops after `attempts` tries once `at_least_s` has passed too,
    or before a wait that would end past `within_s` after the first try. The last exception is re-raised
    as it is. `sleep` replaces asyncio.sleep (tests)."""
    stop: stop_base = stop_never
    if attempts is not None:
        stop = stop_after_attempt(attempts)
        if at_least_s > 0:
            stop = stop & stop_after_delay(at_least_s)
    if within_s is not None:
        stop = stop_before_delay(within_s) if stop is stop_never else stop | stop_before_delay(within_s)
    return AsyncRetrying(
        wait=policy.wait(), stop=stop, retry=retry_if_exception_type(on), reraise=True, sleep=sleep or _sleep
    )


# The named policies: one per kind of peer, where the caps differ. A site may cap one lower at run time.
NATS_CONNECT = Backoff(first_s=0.25, max_s=5.0)  # a component's first connection to NATS
LIFECYCLE_REPORTS = Backoff(first_s=0.05, max_s=5.0)  # a rep cell's outbox to the BBS (rep/outbox.py)
REGISTRATION = Backoff(first_s=0.1, max_s=60.0)  # a rep's first heartbeat; capped at its interval
AUCTION_REPORTS = Backoff(first_s=0.2, max_s=1.6)  # the auctioneer's auction reports to the BBS
LEASE = Backoff(first_s=0.2, max_s=60.0)  # the auctioneer's lease attempts; capped at TTL/3
AUCTIONEER_SENDS = Backoff(first_s=0.1, max_s=1.0, factor=4.0)  # the BBS's start requests over HTTP
AUCTIONEER_SENDS_NATS = Backoff(first_s=0.1, max_s=1.0)  # the same over NATS ("no responders" for a while)
CELL_PROBES = Backoff(first_s=0.5, max_s=0.5)  # the BBS asking a lost cell's rep again, within its window
EVENT_STREAM = Backoff(first_s=0.1, max_s=2.0)  # the CLI following the BBS's events, reconnecting
RESTARTS = Backoff(first_s=1.0, max_s=30.0)  # `vendue up` starting a failed component again
