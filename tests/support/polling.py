"""Waiting in tests: poll a condition with a deadline, and fail saying what was expected and what was seen.

The one polling helper of the tests, in two forms: `wait_for` (blocking, for tests that drive real
processes from plain functions) and `eventually` (a coroutine: the event loop keeps running what the test
waits on). A condition says "not yet" by returning a falsy value, or by raising `Unmet("what I saw")`
(`expect` makes one-line conditions of that); when the deadline passes, the AssertionError reads
"expected <what> within <timeout>s; saw <the last observation>". The deadline bounds the wait, it is no
assertion about how long something took: a condition met at once and one met just before the deadline
pass alike.

`hold_for` is the converse: a condition that must stay true for a while (stability after convergence).
`finishes` bounds an await that only the code under test can end (a stop, a fetch past a peer that never
answers), failing with what it waited for rather than a bare TimeoutError.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Between two looks: blocking waits mostly look at other processes (HTTP, /proc, a CLI run), and each look
# costs those processes CPU too; so the first look after a miss comes soon and each next one half as late
# again, up to WAIT_FOR_MAX_INTERVAL_S (looking every 50 ms throughout, the suite's waits took more than a
# core of a two-core machine). A coroutine's conditions are mostly in-process state, cheap to look at.
WAIT_FOR_INTERVAL_S = 0.05
WAIT_FOR_MAX_INTERVAL_S = 0.25
WAIT_FOR_BACKOFF = 1.5
EVENTUALLY_INTERVAL_S = 0.01
HOLD_FOR_INTERVAL_S = 0.2

NOTHING_SEEN = "nothing (the condition never ran)"


class Unmet(AssertionError):
    """Raised by a condition to report what it saw: inside `wait_for`/`eventually` it means "not yet" (the
    message ends up in the failure); raised outside one it is a plain assertion failure."""


def expect(ok: T, seen: object) -> T:
    """For one-line conditions: `lambda: expect(x == y, f"x={x}")` raises Unmet(seen) unless ok; else
    answers ok (so `expect(task["state"] == "DONE" and task, ...)` answers the task)."""
    if not ok:
        raise Unmet(str(seen))
    return ok


def shown(value: object) -> str:
    """A seen value as the failure message shows it: strings as they are, anything else as its repr."""
    return value if isinstance(value, str) else repr(value)


class _Poll:
    """One wait's deadline and its last observation; the failure it raises once the deadline has passed."""

    def __init__(
        self, now: Callable[[], float], timeout: float, what: str, seen: Callable[[], object] | None
    ) -> None:
        self._now = now
        self._deadline = now() + timeout
        self._timeout = timeout
        self._what = what
        self._seen = seen
        self._last: object = NOTHING_SEEN
        self._last_raised = False

    def not_yet(self, value: object) -> None:
        """The condition answered a falsy value."""
        self._last, self._last_raised = value, False

    def raised(self, exc: BaseException) -> None:
        """The condition raised Unmet (what it saw) or an exception the wait was told to retry on."""
        self._last = str(exc) if isinstance(exc, Unmet) else f"{type(exc).__name__}: {exc}"
        self._last_raised = True

    def fail_if_past_deadline(self) -> None:
        if self._now() >= self._deadline:
            seen = self._observation()
            raise AssertionError(f"expected {self._what} within {self._timeout:g}s; saw {seen}")

    def _observation(self) -> str:
        # What the condition raised says more than a falsy answer; `seen` says more than the answer itself.
        if self._seen is None or self._last_raised:
            return shown(self._last)
        try:
            return shown(self._seen())
        except Exception as exc:  # noqa: BLE001 - the failure must still be reported
            return f"{shown(self._last)} (and looking raised {exc!r})"


def wait_for(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    seen: Callable[[], object] | None = None,
    *,
    interval: float | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `condition` until it answers a truthy value (returned) or `timeout` seconds pass (AssertionError
    naming `what` and the last observation: what the condition raised, else `seen()`, else its answer).
    The looks start WAIT_FOR_INTERVAL_S apart and back off (WAIT_FOR_BACKOFF) to WAIT_FOR_MAX_INTERVAL_S;
    an `interval` given stays the same throughout (a test that must look at a given pace).

    Exceptions of the types in `retry_on` (e.g. a connection refused while a server starts) count as "not
    yet", as Unmet does; any other exception ends the wait at once."""
    poll = _Poll(time.monotonic, timeout, what, seen)
    pause, longest = (interval, interval) if interval else (WAIT_FOR_INTERVAL_S, WAIT_FOR_MAX_INTERVAL_S)
    while True:
        try:
            value = condition()
        except (Unmet, *retry_on) as exc:
            poll.raised(exc)
        else:
            if value:
                return value
            poll.not_yet(value)
        poll.fail_if_past_deadline()
        time.sleep(pause)
        pause = min(longest, pause * WAIT_FOR_BACKOFF)


async def eventually(
    condition: Callable[[], T | Awaitable[T]],
    timeout: float,
    what: str,
    seen: Callable[[], object] | None = None,
    *,
    interval: float = EVENTUALLY_INTERVAL_S,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """`wait_for` for coroutines: the same contract, sleeping on the event loop between looks. The condition
    may be a plain function or answer an awaitable (an `async def`), which is awaited."""
    poll = _Poll(asyncio.get_running_loop().time, timeout, what, seen)
    while True:
        try:
            value = condition()
            if inspect.isawaitable(value):
                value = await value
        except (Unmet, *retry_on) as exc:
            poll.raised(exc)
        else:
            if value:
                return value  # type: ignore[return-value]  # awaited above when it was an awaitable
            poll.not_yet(value)
        poll.fail_if_past_deadline()
        await asyncio.sleep(interval)


async def finishes(awaitable: Awaitable[T], timeout: float, what: str) -> T:
    """Await `awaitable` with a bound: what it answers or raises (a TimeoutError of its own included), or,
    when it has not finished within `timeout` seconds (it is then cancelled), an AssertionError naming
    `what`. For an await that only the code under test can end: the bound is no assertion about how long
    it took."""
    bound = asyncio.timeout(timeout)
    try:
        async with bound:
            return await awaitable
    except TimeoutError:
        if bound.expired():
            raise AssertionError(f"expected {what} within {timeout:g}s; it was still waiting") from None
        raise


def hold_for(
    condition: Callable[[], Any], duration: float, what: str, interval: float = HOLD_FOR_INTERVAL_S
) -> None:
    """Assert `condition` stays true (truthy, no Unmet) at every look for `duration` seconds."""
    deadline = time.monotonic() + duration
    while True:
        try:
            value = condition()
        except Unmet as exc:
            raise AssertionError(f"expected {what} to hold for {duration:g}s; it broke: {exc}") from None
        if not value:
            raise AssertionError(f"expected {what} to hold for {duration:g}s; it broke: {value!r}")
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)
