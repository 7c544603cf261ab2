"""Host labels: an LRP's `labels_match` expression (common/labels.py) must match the cell's labels."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from common.labels import parse_label_expression

from ..work import LRPStart
from .base import Example, StaticFilter, Work, no_claim

if TYPE_CHECKING:
    from ..columns import CellColumns
    from ..slot import CellSlot


class LabelsFilter(StaticFilter):
    name = "labels"
    example = Example(lrp={"labels_match": "disk=ssd"}, admitted={"labels": {"disk": "ssd"}},
                      rejected={"labels": {"disk": "hdd"}})
    claim = staticmethod(no_claim)

    def applies(self, item: Work) -> bool:
        return isinstance(item, LRPStart) and bool(item.ask.labels_match)

    def cell_key(self, slot: CellSlot) -> Hashable:
        return frozenset(slot.cell.labels.items())

    def request_key(self, item: Work) -> Hashable:
        return item.ask.labels_match if isinstance(item, LRPStart) else ""

    def matching(self, cells: CellColumns, expression: str) -> np.ndarray:
        """Cells whose labels match the expression (a request's `labels_match`, or an affinity rule's)."""
        selector = parse_label_expression(expression)
        return cells.class_mask(self, expression, lambda slot: selector.matches(slot.cell.labels))

    def rejects(self, slot: CellSlot, item: Work) -> bool:
        assert isinstance(item, LRPStart)  # `applies` to LRPs only
        return not parse_label_expression(item.ask.labels_match).matches(slot.cell.labels)

    def error(self, item: Work) -> str:
        assert isinstance(item, LRPStart)
        return f'found no compatible cell with labels matching "{item.ask.labels_match}"'

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:
        return f"{len(rejected)} labels mismatch"


LABELS = LabelsFilter()
