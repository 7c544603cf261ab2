"""What a filter is: one constraint, written once, in the two forms every strategy needs.

- `rejects(slot, item)`: the scalar form, over one cell as the auction sees it. It is the executable
  specification: the reference engines and the scalar diagnosis use it.
- `admits(cells, item)`: the vectorised form, over the auction's `CellColumns`: one bool per cell,
  True where the cell passes. The fast engines and the vectorised diagnosis use it; the two forms
  agree cell for cell (`registry_test` checks every registered filter).
- `error(item)` and `summary(rejected, item)`: its reason in a diagnosis. `error` is Diego's placement
  error when no cell gets past the filter; `summary` its part of the per-filter breakdown a person
  reads (`7 insufficient memory (largest free 384 MB, need 512)`).
- `request_key(item)`: everything of the item the filter reads, hashable: equal keys get equal
  verdicts on the same cells (it keys the caches of masks and diagnoses).

A `StaticFilter` reads only what no reservation changes (stacks, tags, labels...): it also says what
it reads of a cell (`cell_key`), and its vectorised form is its scalar form run once per class of
cells with equal keys (`CellColumns.static_mask`). A request filter (an LRP's optional constraint)
says whether an item asks for it (`applies`), and one over something a placement uses up (ingress
IPs, devices, volumes) takes it in `claim`, which the auction state calls on every reservation.

Every filter carries an `Example`: an LRP and two cells it tells apart. It shows what the filter does
at a glance, and `registry_test` runs it under every strategy and both engines: the rejected cell is
never chosen, and when it is the only cell the diagnosis names the filter.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..work import LRPStart, TaskStart

if TYPE_CHECKING:
    from ..columns import CellColumns
    from ..slot import CellSlot

Work = LRPStart | TaskStart


@dataclass(frozen=True, slots=True)
class Example:
    """An LRP (its `Ask` fields, and `LRPStart`'s, beyond a 10 MB instance) and two cells (`CellOffer`
    fields beyond 100 MB of memory and disk and 10 containers, all free; `available` as (memory, disk,
    containers)) that the filter tells apart: it admits the first and rejects the second. `config`:
    `SchedulerConfig` fields the filter needs."""

    lrp: Mapping[str, Any] = field(default_factory=dict)
    admitted: Mapping[str, Any] = field(default_factory=dict)
    rejected: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)


class Filter(Protocol):
    name: str
    resource: bool  # resource filters feed Diego's "insufficient resources: ..." error
    example: Example

    def rejects(self, slot: CellSlot, item: Work) -> bool: ...

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray: ...

    def request_key(self, item: Work) -> Hashable: ...

    def error(self, item: Work) -> str: ...

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str: ...


class RequestFilter(Filter, Protocol):
    def applies(self, item: Work) -> bool: ...

    def claim(self, slot: CellSlot, item: LRPStart) -> None: ...


class StaticFilter:
    """A filter over what no reservation changes; subclasses give `cell_key`, `request_key`, `rejects`,
    `error` and `summary`."""

    name = "static"
    resource = False
    example: Example

    def cell_key(self, slot: CellSlot) -> Hashable:  # pragma: no cover - interface
        raise NotImplementedError

    def request_key(self, item: Work) -> Hashable:  # pragma: no cover - interface
        raise NotImplementedError

    def rejects(self, slot: CellSlot, item: Work) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def admits(self, cells: CellColumns, item: Work) -> np.ndarray:
        return cells.static_mask(self, item)

    def error(self, item: Work) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def summary(self, rejected: Sequence[CellSlot], item: Work) -> str:  # pragma: no cover - interface
        raise NotImplementedError


def no_claim(slot: CellSlot, item: LRPStart) -> None:
    """`claim` of a request filter over nothing a placement uses up."""
