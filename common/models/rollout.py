"""Versions and rollouts of a desired LRP (docs/rollouts.md): how a change of definition replaces its
instances, make-before-break, and what the BBS reports while it does."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from .desired import DesiredLRP
from .fields import Open, Strict

_PERCENT = re.compile(r"^([0-9]{1,3})%$")


def _max_in_flight(value: int | str) -> int | str:
    if isinstance(value, int):
        if value < 1:
            raise ValueError("must be at least 1, or a percentage such as '25%'")
        return value
    match = _PERCENT.match(value)
    if match is None or not 1 <= int(match.group(1)) <= 100:
        raise ValueError("must be an integer >= 1 or a percentage 'N%' with 1 <= N <= 100")
    return value


MaxInFlight = Annotated[int | str, AfterValidator(_max_in_flight)]


def resolve_max_in_flight(value: int | str, instances: int) -> int:
    """The indices a rollout replaces at once: an integer as given, a percentage of the desired instances
    rounded up; never less than 1."""
    if isinstance(value, int):
        return max(1, value)
    percent = int(value.rstrip("%"))
    return max(1, -(-instances * percent // 100))


class RolloutStrategy(Strict):
    """How a change rolls out; not part of the definition (it makes no version)."""

    max_in_flight: MaxInFlight = 1
    auto_revert: bool = True  # a failed new version rolls back (Nomad's auto_revert)
    canary: bool = False  # start ONE new instance, then pause ("canary") until resume


RolloutState = Literal["running", "paused", "completed", "failed", "rolling_back", "rolled_back"]
RolloutKind = Literal["update", "restart", "rollback"]
ROLLOUT_STATES: tuple[str, ...] = ("running", "paused", "completed", "failed", "rolling_back", "rolled_back")
ACTIVE_ROLLOUT_STATES = frozenset({"running", "paused", "rolling_back"})


class Rollout(Open):
    """GET .../rollout, and the data of a `rollout_changed` event."""

    process_guid: str
    kind: RolloutKind
    from_version: int
    to_version: int
    state: RolloutState
    done: int  # indices now running to_version (healthy)
    total: int  # desired instances
    max_in_flight: int  # resolved from the strategy
    auto_revert: bool
    canary: bool
    reason: str | None = None  # why paused, failed or rolled back
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


class Rollouts(Open):
    rollouts: list[Rollout] = Field(default_factory=list)


class LRPVersion(Open):
    version: int
    created_at: datetime
    current: bool
    definition: dict[str, Any]  # the definition fields (env values redacted for a non-admin)


class LRPVersions(Open):
    versions: list[LRPVersion] = Field(default_factory=list)


class DesiredLRPChange(Open):
    """The answer to PUT and PATCH /v1/desired_lrps/{guid}."""

    desired_lrp: DesiredLRP
    new_version: bool
    rollout: Rollout | None = None


class RestartRequest(Strict):
    """POST /v1/desired_lrps/{guid}/restart."""

    all_at_once: bool = False
    max_in_flight: MaxInFlight = 1


class RolloutAction(Strict):
    """The (empty) body of POST .../rollout/pause|resume|undo and of an instance's restart."""


RolloutActionName = Literal["pause", "resume", "undo"]
