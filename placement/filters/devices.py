"""Devices (GPUs, ...): a cell must still have as many free devices of each kind as the LRP asks for."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..ask import DeviceRequest
from ..work import LRPStart
from .base import Example, Work

if TYPE_CHECKING:
    from ..columns import CellColumns
    from ..slot import CellSlot


def devices_wanted(item: Work) -> dict[str, int]:
    """Device counts by kind; two requests for the same kind add up."""
    wanted: dict[str, int] = {}
    for dev in item.ask.devices if isinstance(item, LRPStart) else ():
        wanted[dev.kind] = wanted.get(dev.kind, 0) + dev.count
    return wanted


class DevicesFilter:
    name = "devices"
    example = Example(lrp={"devices": (DeviceRequest("gpu"),)}, admitted={"devices": {"gpu": 1}})
    resource = False

    def applies(self, item: Work) -> bool:
        return isinstance(item, LRPStart) and bool(item.ask.devices)

    def request_key(self, item: Work) -> Hashable:
        return tuple(sorted(devices_wanted(item).items()))

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        free = slot.devices_free
        return any(free.get(kind, 0) < count for kind, count in devices_wanted(item).items())

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        mask = np.ones(cells.size, dtype=bool)
        for kind, count in devices_wanted(item).items():
            mask &= cells.devices(kind) >= count
        return mask

    def claim(self, slot: CellSlot, item: LRPStart) -> None:
        for dev in item.ask.devices:
            slot.devices_free[dev.kind] = slot.devices_free.get(dev.kind, 0) - dev.count

    def error(self, item: Work) -> str:
        return "found no compatible cell with required devices"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} missing devices"


DEVICES = DevicesFilter()
