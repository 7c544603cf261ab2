"""Auctions: the BBS's start requests to the auctioneer, and the auctioneer's report of each auction (what
it could not place, what each cell accepted, why each instance is where it is)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..accepted_work import LRPS_PATTERN, TASKS_PATTERN
from .desired import DesiredLRP
from .fields import MAX_ITEMS, FencingToken, Guid, Name, Open, ProcessText, StoreInt
from .task import Task


class LRPStartRequest(Open):
    """BBS -> auctioneer: start these indices of this desired LRP (one request, all indices)."""

    desired: DesiredLRP
    indices: list[StoreInt] = Field(min_length=1, max_length=10_000)  # DesiredLRPCreate.instances at most


class TaskStartRequest(Open):
    task: Task


class LRPPlacementFailure(Open):
    process_guid: Guid
    index: StoreInt
    error: ProcessText
    detail: ProcessText = ""


class TaskPlacementFailure(Open):
    task_guid: Guid
    error: ProcessText
    detail: ProcessText = ""


# A token of AcceptedWork is at most a guid (128), a colon, ten digits and a space.
MAX_ACCEPTED_CHARS = MAX_ITEMS * 140


class AcceptedWork(Open):
    """What one cell accepted in an auction, in common/accepted_work.py's compact form: `lrps` is
    "process_guid:index" tokens, `tasks` task guids, each separated by single spaces."""

    lrps: Annotated[str, Field(max_length=MAX_ACCEPTED_CHARS, pattern=LRPS_PATTERN)] = ""
    tasks: Annotated[str, Field(max_length=MAX_ACCEPTED_CHARS, pattern=TASKS_PATTERN)] = ""


class PlacementFailures(Open):
    """The auctioneer's report of one auction (POST /v1/placement_failures): what it could not place, and
    what each cell accepted. The BBS keeps the second until the cells' claims arrive, so that work a
    present cell accepted is not auctioned again however late its claim is (bbs/placements.py)."""

    # An auction of 250,000 instances that cannot fit reports every one (the bulk body cap allows it).
    lrps: list[LRPPlacementFailure] = Field(default_factory=list, max_length=MAX_ITEMS * 10)
    tasks: list[TaskPlacementFailure] = Field(default_factory=list, max_length=MAX_ITEMS)
    accepted: dict[Guid, AcceptedWork] = Field(default_factory=dict, max_length=10_000)  # by cell id
    # The auctioneer lease's token the auction ran under: the BBS refuses (409) a report from an older term.
    fencing_token: FencingToken = 0


MAX_EXPLANATIONS = 10_000  # per auction report: the auctioneer's --explanations is at most this


class ScoredCandidate(Open):
    """One cell an auction scored for an instance, as it stood then: Diego's score and its parts."""

    cell_id: Guid
    zone: Name
    zone_index: StoreInt  # the cell's index in its zone: the last tie-break
    components: dict[Name, float] = Field(default_factory=dict, max_length=32)
    chosen: bool = False


class ZoneVisit(Open):
    """A zone in the order the auction tried them for an instance: groups of equal instance count of the
    process (and, for an app with a share per zone, equal room), the earlier group first."""

    zone: Name
    group: StoreInt
    instances: StoreInt | None = None  # of the process in the zone then (None: one group, not recorded)
    room: int | None = None  # instances of this size the zone had room for beyond what it is owed


class PlacementExplanation(Open):
    """Why one LRP instance went where it did in its latest auction, or why nothing could take it:
    for a placed one the candidates (best first) with their score components and what decided;
    for an unplaced one Diego's error and the per-filter breakdown (`detail`)."""

    process_guid: Guid
    index: StoreInt
    placed: bool
    cell_id: Guid | None = None
    strategy: Name | None = None
    error: ProcessText = ""
    detail: ProcessText = ""
    zones: list[ZoneVisit] = Field(default_factory=list, max_length=256)
    candidates: list[ScoredCandidate] = Field(default_factory=list, max_length=32)
    decided_by: ProcessText = ""  # score | zone order | cell index | only candidate | strategy
    zone_order: ProcessText = ""  # why the winner's zone came before the zones of later groups
    auctioned_at: float = 0.0  # epoch seconds: when the auction that decided this ended
    source: Literal["auction", "placement_error"] = "auction"  # the latter: only the stored error is known


class AuctionReport(PlacementFailures):
    """POST /v1/auctions, the auctioneer's one report per auction once its work is sent: what could not be
    placed and what each cell accepted (as PlacementFailures, fenced the same way), with the auction's
    durations and counts (published as `auction_completed`) and its placement explanations."""

    duration_s: float = Field(ge=0, le=86_400)
    fetch_states_s: float = Field(ge=0, le=86_400)
    lrps_placed: StoreInt = 0
    lrps_failed: StoreInt = 0
    tasks_placed: StoreInt = 0
    tasks_failed: StoreInt = 0
    finished_at: float = Field(default=0.0, ge=0)  # epoch seconds
    explanations: list[PlacementExplanation] = Field(default_factory=list, max_length=MAX_EXPLANATIONS)
