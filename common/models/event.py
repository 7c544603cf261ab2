"""Events: the changes the BBS publishes on GET /v1/events (SSE) and on NATS."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from .fields import Open

# What GET /v1/events?type= accepts (and `vendue events --type`): every type the BBS publishes. `resync`:
# a Last-Event-ID the BBS cannot resume from (list again); cell_changed, auction_completed and
# convergence_completed feed the dashboard (/ui).
EVENT_TYPES = (
    "desired_lrp_created", "desired_lrp_changed", "desired_lrp_removed",
    "actual_lrp_created", "actual_lrp_changed", "actual_lrp_removed",
    "task_created", "task_changed", "task_removed",
    "cell_appeared", "cell_disappeared", "cell_removed", "cell_changed",
    "auction_completed", "convergence_completed", "resync",
    "rebalance_move_started", "rebalance_move_completed", "rebalance_move_abandoned",
    "rollout_changed",
    "exec_started", "exec_ended",  # `vendue exec` (docs/exec.md): who ran which program, never its output
)
EventType = Literal[EVENT_TYPES]  # type: ignore[valid-type]


class Event(Open):
    """One change, as sent on the BBS's SSE stream (`id: <id>`, `event: <type>`, `data: <json>`) and on
    NATS. `id`: `<epoch>-<seq>` of the BBS process that published it (bbs/events.py), what a client sends
    back as Last-Event-ID to resume."""

    # One of EVENT_TYPES; cell_changed: cordoned, drained or uncordoned, with the cell state as data.
    type: str
    data: dict
    at: datetime
    id: str = ""
