"""Cell compatibility, in the order Diego checks it: rootfs (stack), volume drivers, placement tags.

All three read only what a cell advertises and no reservation changes: static filters, so their
vectorised form is their scalar form once per class of cells advertising the same.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from .base import Example, StaticFilter, Work

if TYPE_CHECKING:
    from ..slot import CellSlot


class StackFilter(StaticFilter):
    name = "stack"
    example = Example(admitted={"stacks": ("cflinuxfs4",)}, rejected={"stacks": ("windows",)})

    def cell_key(self, slot: CellSlot) -> Hashable:
        return slot.stacks

    def request_key(self, item: Work) -> Hashable:
        return item.ask.stack

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return item.ask.stack not in slot.stacks

    def error(self, item: Work) -> str:
        return "found no compatible cell for required rootfs"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} stack mismatch"


class VolumeDriverFilter(StaticFilter):
    name = "volume_drivers"
    example = Example(lrp={"volume_drivers": ("nfs",)}, admitted={"volume_drivers": frozenset({"nfs"})})

    def cell_key(self, slot: CellSlot) -> Hashable:
        return slot.drivers

    def request_key(self, item: Work) -> Hashable:
        return item.ask.volume_drivers

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return bool(item.ask.volume_drivers) and not slot.drivers.issuperset(item.ask.volume_drivers)

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


class PlacementTagFilter(StaticFilter):
    """Request tags ⊆ cell tags ∪ optional tags, and the cell's required tags ⊆ request tags."""

    name = "placement_tags"
    example = Example(lrp={"placement_tags": ("gpu",)}, admitted={"placement_tags": frozenset({"gpu"})})

    def cell_key(self, slot: CellSlot) -> Hashable:
        return (slot.tags, slot.optional_tags)

    def request_key(self, item: Work) -> Hashable:
        return item.ask.placement_tags

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        wanted = item.ask.placement_tags
        if not slot.tags.issubset(wanted):
            return True
        return any(t not in slot.tags and t not in slot.optional_tags for t in wanted)

    def error(self, item: Work) -> str:
        return placement_tag_error(item.ask.placement_tags)

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} placement tags mismatch"


STACK = StackFilter()
VOLUME_DRIVERS = VolumeDriverFilter()
PLACEMENT_TAGS = PlacementTagFilter()


def compatibility_requirement(item: Work) -> Hashable:
    """What the three filters read of an item, as one key: items with equal keys are compatible with
    the same cells."""
    ask = item.ask
    return (ask.stack, ask.volume_drivers, ask.placement_tags)
