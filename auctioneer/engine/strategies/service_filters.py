"""Request filters for an LRP's optional constraints: host labels, volumes, a free ingress IP, devices.

They hold under every strategy (see `filters.request_filters`): whoever picks, a request for a GPU must
land on a cell that still has one. Each is a small named unit with Diego-style error and summary.

Volumes: each of an instance's volume requests needs its own volume on the cell. A volume the
instance already holds (its ephemeral volume, `holder == "process_guid/index"`) always satisfies a
request — that is the stickiness that brings a restarting instance back to its data; otherwise a free
volume (no holder) large enough whose labels match the request's expression. `volume_plan` is the one
place that decides which volume serves which request: the filter asks whether a plan exists and the
auction state claims what the plan names, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.labels import parse_label_expression, validate_label_expression

from ..state import CellSlot, instance_key
from ..types import LRPStart, Volume, VolumeRequest

__all__ = [
    "DEVICES", "INGRESS_IP", "LABELS", "VOLUMES",
    "match_volume", "volume_plan", "holds_own_volume", "devices_wanted", "validate_label_expression",
]


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


def devices_wanted(item: LRPStart) -> dict[str, int]:
    """Device counts by kind; two requests for the same kind add up."""
    wanted: dict[str, int] = {}
    for dev in item.devices:
        wanted[dev.kind] = wanted.get(dev.kind, 0) + dev.count
    return wanted


class LabelsFilter:
    name = "labels"
    resource = False

    def rejects(self, slot: CellSlot, item: LRPStart) -> bool:
        return not parse_label_expression(item.labels_match).matches(slot.cell.labels)

    def error(self, item: LRPStart) -> str:
        return f'found no compatible cell with labels matching "{item.labels_match}"'

    def summary(self, rejected: Sequence[CellSlot], item: LRPStart) -> str:
        return f"{len(rejected)} labels mismatch"


class VolumesFilter:
    name = "volumes"
    resource = False

    def rejects(self, slot: CellSlot, item: LRPStart) -> bool:
        return volume_plan(slot.volumes, item.volumes, instance_key(item.process_guid, item.index)) is None

    def error(self, item: LRPStart) -> str:
        return "found no compatible cell with required volumes"

    def summary(self, rejected: Sequence[CellSlot], item: LRPStart) -> str:
        return f"{len(rejected)} missing volumes"


class IngressIPFilter:
    name = "ingress_ip"
    resource = False

    def rejects(self, slot: CellSlot, item: LRPStart) -> bool:
        return item.ingress_ip and not slot.ingress_free

    def error(self, item: LRPStart) -> str:
        return "found no compatible cell with a free ingress IP"

    def summary(self, rejected: Sequence[CellSlot], item: LRPStart) -> str:
        return f"{len(rejected)} no free ingress IP"


class DevicesFilter:
    name = "devices"
    resource = False

    def rejects(self, slot: CellSlot, item: LRPStart) -> bool:
        free = slot.devices_free
        return any(free.get(kind, 0) < count for kind, count in devices_wanted(item).items())

    def error(self, item: LRPStart) -> str:
        return "found no compatible cell with required devices"

    def summary(self, rejected: Sequence[CellSlot], item: LRPStart) -> str:
        return f"{len(rejected)} missing devices"


LABELS = LabelsFilter()
VOLUMES = VolumesFilter()
INGRESS_IP = IngressIPFilter()
DEVICES = DevicesFilter()
