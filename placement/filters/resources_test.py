"""`has_room`, the resource filters' verdict in one call, says what MEMORY, DISK and CONTAINERS say."""

import itertools

from placement.testing import lrp_start, task_start

from ..cell_offer import CellOffer, Resources
from ..slot import CellSlot
from .registry import RESOURCES
from .resources import has_room, least_free


def test_has_room_is_the_three_resource_filters_verdict() -> None:
    items = [lrp_start("app", 0, memory_mb=50, disk_mb=20), task_start("t", memory_mb=0, disk_mb=100)]
    for item, free in itertools.product(items, itertools.product((-1, 0, 20, 50, 100), repeat=3)):
        slot = CellSlot(0, 0, CellOffer("c", "z", Resources(100, 100, 100), Resources(*free)))
        admitted = not any(f.rejects(slot, item) for f in RESOURCES)
        assert has_room(free, least_free(item)) is admitted, (item, free)
        assert has_room((*free, 7), least_free(item)) is admitted, "what follows the three is not read"
