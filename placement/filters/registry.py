"""The registry: every filter of the engine, in the order Diego checks them, and the chain an item meets.

Cell compatibility first (rootfs, volume drivers, placement tags), then the optional constraints an
LRP may carry (they hold under every strategy: a request for a GPU lands on a cell with one, whoever
picks), then a strategy's own filters, and resources last. Adding a filter is a module in this
package and one line here (placement/README.md, "How to add a filter").

Every strategy asks here, in one form or the other, which cells pass an item's chain: the reference
engines cell by cell (`first_rejection`), the fast ones as a mask over the auction's columns
(`admitted`). Filters are a conjunction: the order decides only which filter a diagnosis blames.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .base import Filter, RequestFilter, StaticFilter, Work
from .compatibility import PLACEMENT_TAGS, STACK, VOLUME_DRIVERS, compatibility_requirement
from .devices import DEVICES
from .ingress import INGRESS_IP
from .labels import LABELS
from .resources import CONTAINERS, DISK, MEMORY, least_free
from .volumes import VOLUMES

if TYPE_CHECKING:
    from ..columns import CellColumns
    from ..slot import CellSlot

COMPATIBILITY: tuple[StaticFilter, ...] = (STACK, VOLUME_DRIVERS, PLACEMENT_TAGS)
REQUEST: tuple[RequestFilter, ...] = (LABELS, VOLUMES, INGRESS_IP, DEVICES)
RESOURCES: tuple[Filter, ...] = (MEMORY, DISK, CONTAINERS)


def request_filters(item: Work) -> tuple[RequestFilter, ...]:
    """The request filters the item asks for (none for a task or a plain LRP)."""
    ask = item.ask  # a task's asks for none of them
    if not (ask.labels_match or ask.volumes or ask.ingress_ip or ask.devices):
        return ()  # the common case, answered without asking every filter
    return tuple(f for f in REQUEST if f.applies(item))


def invalid_request(item: Work) -> str | None:
    """Why an LRP's label expressions cannot be read, or None.

    Boundaries (the BBS API, workload files) refuse these up front; the engine checks again so that one
    bad request fails alone instead of aborting the whole auction.
    """
    ask = item.ask
    if not (ask.labels_match or ask.volumes or ask.affinity):
        return None
    expressions = [("labels_match", ask.labels_match)]
    expressions += [(f"volumes[{i}].label_match", v.label_match) for i, v in enumerate(ask.volumes)]
    expressions += [(f"affinity[{i}].expression", a.expression) for i, a in enumerate(ask.affinity)]
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


def requirement(item: Work, strategy_filters: Sequence[Filter] = ()) -> Hashable:
    """Everything the item's chain reads of it, as one key: items with equal requirements get equal
    verdicts from every filter on the same cells. Each family's part is its filters' `request_key`
    (compatibility and resources through their one-call forms: a key is made per item)."""
    wanted = request_filters(item)
    return (
        compatibility_requirement(item),
        tuple(f.request_key(item) for f in wanted) if wanted else (),
        tuple(f.request_key(item) for f in strategy_filters) if strategy_filters else (),
        least_free(item),
    )


# --- the scalar form: one cell ---------------------------------------------------------------------------


def first_rejection(slot: CellSlot, item: Work, chain: Sequence[Filter]) -> Filter | None:
    for f in chain:
        if f.rejects(slot, item):
            return f
    return None


# --- the vectorised form: every cell at once -------------------------------------------------------------


def admitted(cells: CellColumns, item: Work, chain: Sequence[Filter]) -> np.ndarray:
    """Per cell, whether it passes the whole chain."""
    mask = np.ones(cells.size, dtype=bool)
    for f in chain:
        mask &= f.admits(cells, item)
    return mask


def feasible_positions(cells: CellColumns, item: Work, chain: Sequence[Filter]) -> np.ndarray:
    """Ascending positions of the cells that pass the whole chain: the cells `first_rejection` passes."""
    return np.flatnonzero(admitted(cells, item, chain))


def rejection_stages(
    cells: CellColumns, item: Work, chain: Sequence[Filter]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per cell, the index in the chain of the first filter rejecting it (len(chain) when none does),
    and each filter's own mask (a diagnosis needs the resource filters' beyond the first rejection)."""
    masks = [f.admits(cells, item) for f in chain]
    stages = np.full(cells.size, len(chain), dtype=np.int64)
    for i in range(len(chain) - 1, -1, -1):
        stages[~masks[i]] = i
    return stages, masks
