"""An app's last events, kept per app by the BBS (GET /v1/desired_lrps/{guid}/events: bbs/app_history.py),
and the crash restart policy they are read against (`vendue app`, the dashboard)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from .fields import Open


class AppEvent(Open):
    """One entry. kind: placed, started, crashed, restarting, unplaceable, evacuating, evacuated, stopped,
    rollout, exec (user, program, args: how many; never the arguments).
    index/cell_id/crash_count/reason for an instance's; state/rollout_kind/to_version/done/total for a
    rollout's."""

    kind: str
    at: datetime
    index: int | None = None
    cell_id: str | None = None
    crash_count: int | None = None
    reason: str | None = None
    state: str | None = None
    # an exec's: who, which program, how many arguments (never the arguments)
    user: str | None = None
    program: str | None = None
    args: int | None = None


class RestartPolicyModel(Open):
    """bbs/restart_policy.py's parameters as this BBS runs them (its --immediate-restarts and the rest)."""

    immediate_restarts: int
    backoff_min: float  # seconds
    backoff_max: float
    max_restarts: int
    reset_after: float


class AppEvents(Open):
    events: list[AppEvent] = Field(default_factory=list)  # oldest first, at most `kept`
    kept: int  # how many this BBS keeps per app
    restart_policy: RestartPolicyModel
