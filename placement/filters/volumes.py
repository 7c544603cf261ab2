"""Volumes: each of an LRP's volume requests needs its own volume on the cell.

A volume the instance already holds (its ephemeral volume, `holder == "process_guid/index"`) always
satisfies a request — that is the stickiness that brings a restarting instance back to its data;
otherwise a free volume (no holder) large enough whose labels match the request's expression.
`volume_plan` is the one place that decides which volume serves which request: the filter asks whether
a plan exists and its claim takes what the plan names, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from common.labels import parse_label_expression

from ..ask import VolumeRequest
from ..cell_offer import Volume
from ..work import LRPStart
from .base import Example, Work

if TYPE_CHECKING:
    from ..columns import CellColumns
    from ..slot import CellSlot


def instance_key(process_guid: str, index: int) -> str:
    return f"{process_guid}/{index}"


def match_volume(volume: Volume, request: VolumeRequest) -> bool:
    """A free volume can serve the request: no holder, large enough, labels match the expression."""
    return (
        volume.holder is None
        and volume.size_mb >= request.size_mb
        and parse_label_expression(request.label_match).matches(volume.labels)
    )


def volume_plan(
    volumes: Sequence[Volume], requests: Sequence[VolumeRequest], holder: str
) -> list[int] | None:
    """For each request in order, the index of the volume that serves it; None when some cannot be served.

    Greedy, one volume per request: first a volume `holder` already holds with the request's name, then
    any other volume it holds, then the first free matching volume.
    """
    used: set[int] = set()
    plan: list[int] = []
    for request in requests:
        chosen = next(
            (
                i
                for i, v in enumerate(volumes)
                if i not in used and v.holder == holder and v.name == request.name
            ),
            None,
        )
        if chosen is None:
            chosen = next((i for i, v in enumerate(volumes) if i not in used and v.holder == holder), None)
        if chosen is None:
            chosen = next(
                (i for i, v in enumerate(volumes) if i not in used and match_volume(v, request)), None
            )
        if chosen is None:
            return None
        used.add(chosen)
        plan.append(chosen)
    return plan


def holds_own_volume(slot: CellSlot, item: LRPStart) -> bool:
    """Whether the cell holds a volume of this very instance (where its ephemeral data lives)."""
    holder = instance_key(item.process_guid, item.index)
    return any(v.holder == holder for v in slot.volumes)


class VolumesFilter:
    name = "volumes"
    example = Example(
        lrp={"volumes": (VolumeRequest("data", 100),)},
        admitted={"volumes": [Volume("v", 500)]},
        rejected={"volumes": [Volume("v", 50)]},
    )
    resource = False

    def applies(self, item: Work) -> bool:
        return isinstance(item, LRPStart) and bool(item.ask.volumes)

    def request_key(self, item: Work) -> Hashable:
        # the instance itself: a volume it already holds serves it, and no other instance
        return (item.key, item.ask.volumes) if isinstance(item, LRPStart) else None

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        if not isinstance(item, LRPStart) or not item.ask.volumes:
            return False
        holder = instance_key(item.process_guid, item.index)
        return volume_plan(slot.volumes, item.ask.volumes, holder) is None

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        if not self.applies(item):
            return np.ones(cells.size, dtype=bool)
        # Only a cell with volumes can serve a volume request: the plan is made on those alone.
        mask = np.zeros(cells.size, dtype=bool)
        slots = cells.slots
        for pos in cells.with_volumes:
            mask[pos] = not self.rejects(slots[pos], item)
        return mask

    def claim(self, slot: CellSlot, item: LRPStart) -> None:
        holder = instance_key(item.process_guid, item.index)
        plan = volume_plan(slot.volumes, item.ask.volumes, holder) or ()
        for i, request in zip(plan, item.ask.volumes, strict=False):
            volume = slot.volumes[i]
            if volume.holder is None:  # a volume the instance already holds stays as it is
                slot.volumes[i] = Volume(
                    volume.name, volume.size_mb, volume.labels, request.ephemeral, holder
                )

    def error(self, item: Work) -> str:
        return "found no compatible cell with required volumes"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} missing volumes"


VOLUMES = VolumesFilter()
