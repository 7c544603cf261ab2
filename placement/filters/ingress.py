"""A free ingress IP, for an LRP that asks for one; placing it takes the cell's first free IP."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..work import LRPStart
from .base import Example, Work

if TYPE_CHECKING:
    from ..columns import CellColumns
    from ..slot import CellSlot


def wants_ingress_ip(item: Work) -> bool:
    return isinstance(item, LRPStart) and item.ask.ingress_ip


class IngressIPFilter:
    name = "ingress_ip"
    example = Example(lrp={"ingress_ip": True}, admitted={"ingress_ips": ["198.18.0.10"]})
    resource = False

    def applies(self, item: Work) -> bool:
        return wants_ingress_ip(item)

    def request_key(self, item: Work) -> Hashable:
        return wants_ingress_ip(item)

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        return wants_ingress_ip(item) and not slot.ingress_free

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        if not wants_ingress_ip(item):
            return np.ones(cells.size, dtype=bool)
        return cells.ingress_free >= 1

    def claim(self, slot: CellSlot, item: LRPStart) -> None:
        if slot.ingress_free:
            slot.ingress_free.pop(0)

    def error(self, item: Work) -> str:
        return "found no compatible cell with a free ingress IP"

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} no free ingress IP"


INGRESS_IP = IngressIPFilter()
