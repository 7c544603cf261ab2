"""NATS subject names. Bodies are the same pydantic JSON as over HTTP (common/models/):

vendue.auctioneer.lrps        [LRPStartRequest]  (queue group: one auctioneer takes each) -> {"accepted": n}
vendue.auctioneer.tasks       [TaskStartRequest]                                           -> {"accepted": n}
vendue.cells.state            empty; every rep process answers once: HostCellStates, the bids of its live
                              cells (as GET /state?lrps=counts), its rep_id in the REP_ID_HEADER
                              (scatter-gather)
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
CELLS_STATE = "vendue.cells.state"
EVENTS_PREFIX = "vendue.events"
EVENTS_ALL = EVENTS_PREFIX + ".>"
# Every state reply names its rep process here too, so a reply whose body cannot be read still drops
# that process's cells at once instead of holding the gather open until its deadline.
REP_ID_HEADER = "Vendue-Rep-Id"


def rep_subject(rep_id: str, verb: str) -> str:
    """vendue.rep.<rep_id>.<verb> (work, stop, cancel): one rep process, whatever number of cells it hosts
    (the one rep API: the body names the cells). NATS permissions let only that rep subscribe to it. A `.`
    in the id becomes `_` (subject_token); rep and sender apply the same mapping."""
    return f"vendue.rep.{subject_token(rep_id)}.{verb}"


def rep_wildcard(rep_id: str) -> str:
    return f"vendue.rep.{subject_token(rep_id)}.>"


def event_subject(event_type: str) -> str:
    return f"{EVENTS_PREFIX}.{subject_token(event_type)}"


def subject_token(name: str) -> str:
    """A name usable as one subject token: `.`, `*`, `>` and whitespace become `_`."""
    return "".join("_" if c in ".*> \t\r\n" else c for c in name) or "_"
