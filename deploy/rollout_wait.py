"""Follow a rollout until it ends (`vendue push` on an existing app, `apply`, `restart`, `rollout undo`).

It polls GET /v1/desired_lrps/{guid}/rollout: a rollout ends completed (exit 0), failed or rolled back
(exit 1, one line with the BBS's reason), or paused (a canary at its pause: exit 0, saying how to go on;
any other pause: exit 1 with its reason). A newer rollout of the same app is either the BBS rolling ours
back (a `rollback` from our version: followed to its end) or someone else's change, which ends the wait.
Polling, not the event stream: one small GET a half second is cheap, needs no reconnection logic, and
sees the state however many replicas the BBS has.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .cli_style import FAILURE

POLL_S = 0.5
# A failed rollout may show `paused` a moment before the BBS starts rolling it back (auto_revert): so long,
# a pause that is no canary's is waited out before it is reported.
REVERT_GRACE_S = 5.0
# The BBS may restart (or fail over) while a rollout runs: its state survives, so the wait goes on through
# so long a silence.
UNREACHABLE_GIVE_UP_S = 30.0
ENDED = frozenset({"completed", "failed", "rolled_back"})


class RolloutReader(Protocol):
    def get_rollout(self, guid: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    code: int  # the command's exit status: 0 or FAILURE
    message: str
    rollout: Mapping[str, Any] | None


def is_canary_pause(rollout: Mapping[str, Any]) -> bool:
    """A canary paused as planned (its one new instance up), not for a failure."""
    reason = str(rollout.get("reason") or "")
    return (rollout.get("state") == "paused" and bool(rollout.get("canary"))
            and (not reason or "canary" in reason.lower()))


def _same_rollout(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (a.get("kind"), a.get("to_version"), a.get("started_at")) == (
        b.get("kind"), b.get("to_version"), b.get("started_at"))


def _is_our_rollback(ours: Mapping[str, Any], seen: Mapping[str, Any]) -> bool:
    return (seen.get("kind") == "rollback" and ours.get("kind") != "rollback"
            and seen.get("from_version") == ours.get("to_version"))


def describe_end(guid: str, rollout: Mapping[str, Any], rolled_back_from: int | None = None) -> Outcome:
    """The outcome of a rollout that ended or paused (`rolled_back_from`: the version we rolled out, when
    what ended is the BBS's rollback of it)."""
    state, kind = rollout.get("state"), rollout.get("kind")
    reason = rollout.get("reason") or "no reason given"
    to, start = rollout.get("to_version"), rollout.get("from_version")
    done, total = rollout.get("done"), rollout.get("total")
    if rolled_back_from is not None:
        verdict = "rolled back to" if state == "completed" else f"rolling back ({state}) to"
        return Outcome(FAILURE, f"{guid}: version {rolled_back_from} failed and was {verdict} version {to}: "
                       f"{reason}", rollout)
    if state == "completed":
        if kind == "restart":
            return Outcome(0, f"{guid}: restarted {done}/{total} instance(s)", rollout)
        if kind == "rollback":
            return Outcome(0, f"{guid}: rolled back to version {to} ({done}/{total} instance(s))", rollout)
        return Outcome(0, f"{guid}: version {to} rolled out to {done}/{total} instance(s)", rollout)
    if state == "rolled_back":
        return Outcome(FAILURE, f"{guid}: version {to} failed and was rolled back to version {start}: "
                       f"{reason}", rollout)
    if state == "failed":
        return Outcome(FAILURE, f"{guid}: rollout of version {to} failed: {reason}", rollout)
    if is_canary_pause(rollout):
        return Outcome(0, f"{guid}: canary of version {to} running ({done}/{total}); `vendue rollout resume "
                       f"{guid}` continues, `vendue rollout undo {guid}` goes back", rollout)
    if state == "paused":
        return Outcome(FAILURE, f"{guid}: rollout of version {to} paused at {done}/{total}: {reason} "
                       f"(`vendue rollout resume {guid}` or `vendue rollout undo {guid}`)", rollout)
    return Outcome(FAILURE, f"{guid}: rollout of version {to} is {state} at {done}/{total}", rollout)


def wait_rollout(
    client: RolloutReader,
    guid: str,
    started: Mapping[str, Any],
    *,
    timeout: float | None = None,
    on_progress: Callable[[Mapping[str, Any]], None] = lambda rollout: None,
    poll_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    transient: tuple[type[Exception], ...] = (),
) -> Outcome:
    """Follow `started` (the rollout the BBS answered a change with) until it ends, pauses, or `timeout`
    seconds pass (None: until it ends; a rollout ends by itself, failing what does not get healthy).
    `transient`: the errors of a BBS that is away for a moment (re-raised after UNREACHABLE_GIVE_UP_S)."""
    deadline = None if timeout is None else clock() + timeout
    ours: Mapping[str, Any] = started
    rolling_back_from: int | None = None
    seen: Mapping[str, Any] = started
    paused_since: float | None = None
    answered = clock()
    while True:
        try:
            latest = client.get_rollout(guid)
            answered = clock()
        except transient:
            if clock() - answered >= UNREACHABLE_GIVE_UP_S:
                raise
            latest = None
        if latest is not None:
            if _same_rollout(latest, ours):
                seen = latest
            elif rolling_back_from is None and _is_our_rollback(ours, latest):
                rolling_back_from = int(ours.get("to_version") or 0)
                ours = seen = latest
            else:
                return Outcome(FAILURE, f"{guid}: superseded by another change (a {latest.get('kind')} to "
                               f"version {latest.get('to_version')}, {latest.get('state')}); follow it with "
                               f"`vendue rollout status {guid}`", latest)
            on_progress(seen)
            state = seen.get("state")
            if state in ENDED:
                return describe_end(guid, seen, rolling_back_from)
            if state == "paused":
                paused_since = clock() if paused_since is None else paused_since
                reverting = seen.get("auto_revert") and not is_canary_pause(seen)
                if not reverting or clock() - paused_since >= REVERT_GRACE_S:
                    return describe_end(guid, seen, rolling_back_from)
            else:
                paused_since = None
        if deadline is not None and clock() >= deadline:
            return Outcome(FAILURE, f"{guid}: rollout still {seen.get('state')} after {timeout:g}s at "
                           f"{seen.get('done')}/{seen.get('total')}; follow it with `vendue rollout status "
                           f"{guid}`", seen)
        sleep(poll_s)
