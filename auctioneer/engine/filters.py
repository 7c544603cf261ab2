"""Filters: small named units, each with one job, that say why a cell cannot take a piece of work.

A filter answers `rejects(slot, item)`; `error(item)` is Diego's placement error when no cell gets past
it; `summary(rejected, item)` is its part of the per-filter breakdown a person reads
(`7 insufficient memory (largest free 384 MB, need 512)`). Filters run in the order Diego checks them:
cell compatibility (rootfs, volume drivers, placement tags), the request's optional constraints, a
strategy's own filters, and resources last.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .state import CellSlot
from .types import LRPStart, TaskStart

Work = LRPStart | TaskStart


class Filter(Protocol):
    name: str
    resource: bool  # resource filters feed Diego's "insufficient resources: ..." error

    def rejects(self, slot: CellSlot, item: Work) -> bool: ...

    def error(self, item: Work) -> str: ...

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str: ...


class StackFilter:
    name = "stack"
    resource = False

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return item.stack not in slot.stacks

    def error(self, item: Work) -> str:
        return "found no compatible cell for required rootfs"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} stack mismatch"


class VolumeDriverFilter:
    name = "volume_drivers"
    resource = False

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return bool(item.volume_drivers) and not slot.drivers.issuperset(item.volume_drivers)

    def error(self, item: Work) -> str:
        return "found no compatible cell with required volume drivers"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} missing volume drivers"


def placement_tag_error(tags: Sequence[str]) -> str:
    if not tags:
        return "found no compatible cell with no placement tags"
    quoted = [f'"{t}"' for t in tags]
    if len(quoted) == 1:
        return f"found no compatible cell with placement tag {quoted[0]}"
    return f"found no compatible cell with placement tags {', '.join(quoted[:-1])} and {quoted[-1]}"


class PlacementTagFilter:
    """Request tags ⊆ cell tags ∪ optional tags, and the cell's required tags ⊆ request tags."""

    name = "placement_tags"
    resource = False

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        wanted = item.placement_tags
        if not slot.tags.issubset(wanted):
            return True
        return any(t not in slot.tags and t not in slot.optional_tags for t in wanted)

    def error(self, item: Work) -> str:
        return placement_tag_error(item.placement_tags)

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} placement tags mismatch"


class MemoryFilter:
    name = "memory"
    resource = True

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return slot.avail_m < item.memory_mb

    def error(self, item: Work) -> str:
        return "insufficient resources: memory"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        largest = max(s.avail_m for s in rejected)
        return f"{len(rejected)} insufficient memory (largest free {largest} MB, need {item.memory_mb})"


class DiskFilter:
    name = "disk"
    resource = True

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return slot.avail_d < item.disk_mb

    def error(self, item: Work) -> str:
        return "insufficient resources: disk"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        largest = max(s.avail_d for s in rejected)
        return f"{len(rejected)} insufficient disk (largest free {largest} MB, need {item.disk_mb})"


class ContainerFilter:
    name = "containers"
    resource = True

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return slot.avail_c < 1

    def error(self, item: Work) -> str:
        return "insufficient resources: containers"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} no free container slots"


STACK = StackFilter()
VOLUME_DRIVERS = VolumeDriverFilter()
PLACEMENT_TAGS = PlacementTagFilter()
MEMORY = MemoryFilter()
DISK = DiskFilter()
CONTAINERS = ContainerFilter()

COMPATIBILITY: tuple[Filter, ...] = (STACK, VOLUME_DRIVERS, PLACEMENT_TAGS)
RESOURCES: tuple[Filter, ...] = (MEMORY, DISK, CONTAINERS)


def request_filters(item: Work) -> tuple[Filter, ...]:
    """Filters for the optional constraints an LRP may carry (labels, volumes, ingress IP, devices).

    They hold under every strategy: a request for a GPU must land on a cell with one, whoever picks.
    """
    if not isinstance(item, LRPStart):
        return ()
    if not (item.labels_match or item.volumes or item.ingress_ip or item.devices):
        return ()
    from .strategies.service_filters import (
        DEVICES,
        INGRESS_IP,
        LABELS,
        VOLUMES,
    )

    chosen: list[Filter] = []
    if item.labels_match:
        chosen.append(LABELS)
    if item.volumes:
        chosen.append(VOLUMES)
    if item.ingress_ip:
        chosen.append(INGRESS_IP)
    if item.devices:
        chosen.append(DEVICES)
    return tuple(chosen)


def invalid_request(item: Work) -> str | None:
    """Why an LRP's label expressions cannot be read, or None.

    Boundaries (the BBS API, workload files) refuse these up front; the engine checks again so that one
    bad request fails alone instead of aborting the whole auction.
    """
    if not isinstance(item, LRPStart) or not (item.labels_match or item.volumes or item.affinity):
        return None
    expressions = [("labels_match", item.labels_match)]
    expressions += [(f"volumes[{i}].label_match", v.label_match) for i, v in enumerate(item.volumes)]
    expressions += [(f"affinity[{i}].expression", a.expression) for i, a in enumerate(item.affinity)]
    from common.labels import validate_label_expression

    for field, text in expressions:
        if text:
            try:
                validate_label_expression(text)
            except ValueError as exc:
                return f"invalid placement request: {field}: {exc}"
    return None


def filter_chain(item: Work, strategy_filters: Sequence[Filter] = ()) -> tuple[Filter, ...]:
    return (*COMPATIBILITY, *request_filters(item), *strategy_filters, *RESOURCES)


def first_rejection(slot: CellSlot, item: Work, chain: Sequence[Filter]) -> Filter | None:
    for f in chain:
        if f.rejects(slot, item):
            return f
    return None


def feasible(slot: CellSlot, item: Work, chain: Sequence[Filter]) -> bool:
    return first_rejection(slot, item, chain) is None
