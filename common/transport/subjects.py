"""NATS subject names and the few message bodies that have no HTTP twin in common/models.py.

Bodies are the same pydantic JSON as over HTTP:
  vendue.auctioneer.lrps        [LRPStartRequest]  (queue group: one auctioneer takes each) -> {"accepted": n}
  vendue.auctioneer.tasks       [TaskStartRequest]                                           -> {"accepted": n}
  vendue.cells.state            empty; every rep answers one CellState per hosted cell (scatter-gather),
                                in its summary form (lrp_counts, as GET /state?lrps=counts)
  vendue.cells.heartbeat        CellPresence, published every heartbeat round
  vendue.cell.<id>.work         Work       -> WorkResult
  vendue.cell.<id>.stop         StopLRP    -> Found
  vendue.cell.<id>.cancel       CancelTask -> Found
  vendue.events.<type>          Event (the same events as the BBS's SSE stream)
"""

from __future__ import annotations

from common.models import Open

AUCTIONEER_LRPS = "vendue.auctioneer.lrps"
AUCTIONEER_TASKS = "vendue.auctioneer.tasks"
AUCTIONEER_QUEUE = "vendue-auctioneer"  # queue group: each auction request goes to one auctioneer
CELLS_STATE = "vendue.cells.state"
CELLS_HEARTBEAT = "vendue.cells.heartbeat"
EVENTS_PREFIX = "vendue.events"
EVENTS_ALL = EVENTS_PREFIX + ".>"
# Every state reply names its cell here too, so a reply whose body cannot be read is still attributed.
CELL_ID_HEADER = "Vendue-Cell-Id"


def cell_subject(cell_id: str, verb: str) -> str:
    """vendue.cell.<id>.<verb> (verb: work, stop or cancel). A `.` in a cell id (the guid pattern allows
    it) becomes `_`, since NATS reads dots as token separators; rep and sender apply the same mapping."""
    return f"vendue.cell.{subject_token(cell_id)}.{verb}"


def rep_subject(rep_id: str, verb: str) -> str:
    """vendue.rep.<rep_id>.<verb> (work, stop, cancel): one rep process, whatever number of cells it hosts
    (the one rep API: the body names the cells). NATS permissions let only that rep subscribe to it."""
    return f"vendue.rep.{subject_token(rep_id)}.{verb}"


def rep_wildcard(rep_id: str) -> str:
    return f"vendue.rep.{subject_token(rep_id)}.>"


def cell_wildcard(cell_id: str) -> str:
    return f"vendue.cell.{subject_token(cell_id)}.*"


def event_subject(event_type: str) -> str:
    return f"{EVENTS_PREFIX}.{subject_token(event_type)}"


def subject_token(name: str) -> str:
    """A name usable as one subject token: `.`, `*`, `>` and whitespace become `_`."""
    return "".join("_" if c in ".*> \t\r\n" else c for c in name) or "_"


class StopLRP(Open):
    process_guid: str
    instance_guid: str


class CancelTask(Open):
    task_guid: str


class Found(Open):
    found: bool
