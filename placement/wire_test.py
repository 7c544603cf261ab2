"""Every placement field of the wire reaches the engine through the one adapter (wire.py).

Each test walks the wire model's fields, so a field added to the wire fails here until the adapter
carries it (or, for a cell, until it is named below as one placement does not read, with the reason).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

from common.models import CellOffers, CellPresence, CellState, PlacementFields

from .ask import Ask
from .cell_offer import CellOffer
from .wire import ask_of, cell_offer, stored_cell_offer, stored_placement_fields

# A value other than the default for every field of PlacementFields.
ASKED: dict[str, Any] = {
    "memory_mb": 512,
    "disk_mb": 2048,
    "stack": "windows",
    "placement_tags": ["gpu"],
    "volume_drivers": ["nfs"],
    "strategy": "objective",
    "objective": "diego-blog",
    "source_blob": "https://blobs.example/app.tgz",
    "labels_match": "disk=ssd",
    "volumes": [{"name": "data", "size_mb": 10, "label_match": "tier=db", "ephemeral": True}],
    "ingress_ip": True,
    "devices": [{"kind": "gpu", "count": 2}],
    "affinity": [{"expression": "rack=r1", "weight": -2.0}],
}


def plain(value: Any) -> Any:
    """A wire value or an engine value as plain data, to compare the two."""
    if isinstance(value, BaseModel):
        return plain(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.compare}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, frozenset | set):
        return sorted(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def test_an_ask_has_exactly_the_wires_placement_fields() -> None:
    asked = {f.name for f in dataclasses.fields(Ask) if f.compare}
    assert asked == set(PlacementFields.model_fields)
    assert set(ASKED) == set(PlacementFields.model_fields), "give every wire field a value above"


@pytest.mark.parametrize("name", sorted(PlacementFields.model_fields))
def test_every_placement_field_arrives_in_the_ask(name: str) -> None:
    fields = PlacementFields.model_validate({name: ASKED[name]})
    default = ask_of(PlacementFields())
    ask = ask_of(fields)
    assert plain(getattr(ask, name)) == plain(getattr(fields, name)) != plain(getattr(default, name))
    assert ask != default


def test_a_stored_definition_gives_the_same_ask_as_the_model() -> None:
    fields = PlacementFields.model_validate(ASKED)
    stored = {**fields.model_dump(mode="json"), "process_guid": "web", "command": ["run"], "instances": 3}
    assert ask_of(stored_placement_fields(stored)) == ask_of(fields)


def test_apps_asking_alike_share_an_ask_value() -> None:
    first = ask_of(PlacementFields.model_validate(ASKED))
    second = ask_of(PlacementFields.model_validate(ASKED))
    assert first == second and hash(first) == hash(second)
    assert len({first, second, ask_of(PlacementFields())}) == 2


# --- a cell's bid ----------------------------------------------------------------------------------------

BID: dict[str, Any] = {
    "cell_id": "cell-1",
    "zone": "z1",
    "stacks": ["windows"],
    "total": {"memory_mb": 8192, "disk_mb": 32768, "containers": 250},
    "available": {"memory_mb": 4096, "disk_mb": 30000, "containers": 200},
    "starting_containers": 2,
    "placement_tags": ["gpu"],
    "optional_placement_tags": ["ssd"],
    "volume_drivers": ["nfs"],
    "labels": {"rack": "r1"},
    "lrp_counts": {"web": 2},
    "stopping_counts": {"old": 1},
    "tasks": [{"task_guid": "t1", "memory_mb": 1, "disk_mb": 1}],
}
OFFERS: dict[str, Any] = {
    "host": {"load5": 2.5, "cores": 4},
    "volumes": [{"name": "v", "size_mb": 100}],
    "ingress_ips": ["10.0.0.1"],
    "devices": {"gpu": 2},
    "cached_blobs": ["https://blobs.example/app.tgz"],
}
# CellState fields placement does not read, and why: the auctioneer leaves such a cell out of the auction.
NOT_BID = {"evacuating", "cordoned", "offers"}  # `offers`: its own fields are walked below
MINIMAL_BID = {"cell_id": "c", "zone": "z", "total": BID["total"], "available": BID["total"]}


def test_every_bid_field_is_carried_or_named_as_unread() -> None:
    assert set(BID) | NOT_BID == set(CellState.model_fields)
    assert set(OFFERS) == set(CellOffers.model_fields)


def changed(before: CellOffer, after: CellOffer) -> set[str]:
    fields = dataclasses.fields(CellOffer)
    return {f.name for f in fields if getattr(before, f.name) != getattr(after, f.name)}


@pytest.mark.parametrize("name", sorted(set(BID) - set(MINIMAL_BID)))
def test_every_bid_field_arrives_in_the_cell_offer(name: str) -> None:
    bid = {**MINIMAL_BID, "available": BID["available"]}
    before = cell_offer(CellState.model_validate(bid))
    after = cell_offer(CellState.model_validate({**bid, name: BID[name]}))
    assert changed(before, after), name


@pytest.mark.parametrize("name", sorted(OFFERS))
def test_every_offer_arrives_in_the_cell_offer(name: str) -> None:
    before = cell_offer(CellState.model_validate({**MINIMAL_BID, "offers": {}}))
    after = cell_offer(CellState.model_validate({**MINIMAL_BID, "offers": {name: OFFERS[name]}}))
    assert changed(before, after), name


def test_the_minimal_bid_fields_arrive() -> None:
    cell = cell_offer(CellState.model_validate(BID))
    assert (cell.cell_id, cell.zone) == ("cell-1", "z1")
    assert plain(cell.total) == BID["total"] and plain(cell.available) == BID["available"]


# --- a cell as the BBS holds its heartbeat (the rebalance planner's input) ----------------------------------

HEARTBEAT: dict[str, Any] = {
    "zone": "z1",
    "total": {"memory_mb": 8192, "disk_mb": 32768, "containers": 250},
    "stacks": ["windows"],
    "placement_tags": ["gpu"],
    "optional_placement_tags": ["ssd"],
    "volume_drivers": ["nfs"],
    "labels": {"rack": "r1"},
    "host": {"load5": 2.5, "cores": 4},
    "cached_blobs": ["https://blobs.example/app.tgz"],
}
# CellPresence fields the planner does not read, and why: who serves the cell and how (rep_url, rep_id,
# insecure, isolation, boot_id, expires_at, state), what it holds (available, instances, starting: the BBS
# counts its own actual LRPs instead) and whether it takes work (evacuating, cordoned, draining: such a
# cell is left out of the plan); `cell_id` is the record's own.
NOT_READ_BY_THE_PLANNER = {
    "cell_id", "rep_url", "rep_id", "insecure", "isolation", "boot_id", "expires_at", "state",
    "available", "instances", "starting", "evacuating", "cordoned", "draining",
}


def test_every_heartbeat_field_is_carried_or_named_as_unread() -> None:
    assert set(HEARTBEAT) | NOT_READ_BY_THE_PLANNER == set(CellPresence.model_fields)


@pytest.mark.parametrize("name", sorted(set(HEARTBEAT) - {"total"}))
def test_every_heartbeat_field_arrives_in_the_planners_cell(name: str) -> None:
    before = stored_cell_offer("c", {"zone": "z", "total": HEARTBEAT["total"]})
    after = stored_cell_offer("c", {"zone": "z", "total": HEARTBEAT["total"], name: HEARTBEAT[name]})
    assert changed(before, after), name
    presence = CellPresence.model_validate({**HEARTBEAT, "cell_id": "c", "rep_url": "http://rep:1"})
    assert stored_cell_offer("c", presence.model_dump(mode="json")) == stored_cell_offer("c", HEARTBEAT)
