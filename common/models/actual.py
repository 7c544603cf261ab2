"""Actual LRPs: the instances the BBS records, one per index of a desired LRP."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from .fields import DEFAULT_DOMAIN, ModificationTag, Open, Port


class ActualState(StrEnum):
    UNCLAIMED = "UNCLAIMED"
    CLAIMED = "CLAIMED"
    RUNNING = "RUNNING"
    CRASHED = "CRASHED"


class Presence(StrEnum):
    ORDINARY = "ORDINARY"
    EVACUATING = "EVACUATING"
    SUSPECT = "SUSPECT"


class PortMapping(Open):
    container_port: Port
    host_port: Port


class ActualLRP(Open):
    process_guid: str
    index: int
    domain: str = DEFAULT_DOMAIN
    instance_guid: str = ""
    cell_id: str = ""
    zone: str = ""
    state: ActualState = ActualState.UNCLAIMED
    presence: Presence = Presence.ORDINARY
    host: str = ""
    ports: list[PortMapping] = Field(default_factory=list)
    address: str = ""
    crash_count: int = 0
    crash_reason: str = ""
    since: datetime
    placement_error: str = ""
    modification_tag: ModificationTag
    version: int = 1  # the definition version the instance runs (the one it was started for)


class ActualLRPSummary(Open):
    """Counts of actual LRPs (GET /v1/actual_lrps/summary): what a poller needs without the rows."""

    total: int = 0
    by_state: dict[str, int] = Field(default_factory=dict)  # ORDINARY instances by state
    by_presence: dict[str, int] = Field(default_factory=dict)
