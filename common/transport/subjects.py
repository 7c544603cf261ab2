"""NATS subject names. Bodies are the same pydantic JSON as over HTTP (common/models/):

vendue.auctioneer.lrps        [LRPStartRequest]  (queue group: one auctioneer takes each) -> {"accepted": n}
vendue.auctioneer.tasks       [TaskStartRequest]                                           -> {"accepted": n}
vendue.cells.state.<rep_id>   empty -> HostCellStates, the bids of the process's live cells (as
                              GET /state?lrps=counts); the auctioneer sends one per rep process, each with
                              a reply subject of its own, and trusts a reply only for that process's cells
vendue.rep.<rep_id>.work      HostWork       -> HostWorkResult
vendue.rep.<rep_id>.stop      StopInstances  -> Found
vendue.rep.<rep_id>.cancel    CancelTasks    -> Found
vendue.rep.<rep_id>.cordon    CordonCells    -> Found
vendue.events.<type>          Event (the same events as the BBS's SSE stream)
"""

from __future__ import annotations

AUCTIONEER_LRPS = "vendue.auctioneer.lrps"
AUCTIONEER_TASKS = "vendue.auctioneer.tasks"
AUCTIONEER_QUEUE = "vendue-auctioneer"  # queue group: each auction request goes to one auctioneer
CELLS_STATE_PREFIX = "vendue.cells.state"
EVENTS_PREFIX = "vendue.events"
EVENTS_ALL = EVENTS_PREFIX + ".>"


def rep_subject(rep_id: str, verb: str) -> str:
    """vendue.rep.<rep_id>.<verb> (work, stop, cancel, cordon): one rep process, whatever number of cells it
    hosts (the one rep API: the body names the cells). NATS permissions let only that rep subscribe to it.
    A `.` in the id becomes `_` (subject_token); rep and sender apply the same mapping."""
    return f"vendue.rep.{subject_token(rep_id)}.{verb}"


def cells_state_subject(rep_id: str) -> str:
    """vendue.cells.state.<rep_id>: the state request to one rep process, which only it may subscribe to
    (so a reply to it is that process's). Apart from vendue.rep.<rep_id>.> so that a state request is
    never queued behind a work request whose fencing check is waiting on the BBS (nats-py runs one
    subscription's callbacks one at a time)."""
    return f"{CELLS_STATE_PREFIX}.{subject_token(rep_id)}"


def rep_wildcard(rep_id: str) -> str:
    return f"vendue.rep.{subject_token(rep_id)}.>"


def event_subject(event_type: str) -> str:
    return f"{EVENTS_PREFIX}.{subject_token(event_type)}"


def subject_token(name: str) -> str:
    """A name usable as one subject token: `.`, `*`, `>` and whitespace become `_`."""
    return "".join("_" if c in ".*> \t\r\n" else c for c in name) or "_"
