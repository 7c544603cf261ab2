"""Each zone's room for more work in one auction, and the Diego strategy's order of equal-count zones.

Diego visits zones in groups of equal instance count of the process, fewest first, and takes the
lowest cell score within a group. Which of the equal-count zones gets an instance is left to that score.
Here, for a process with at least as many instances as zones, equal-count zones are further ordered by
their *room* for the item, most first; zones equal in count and room stay one group, where the lowest
score still decides, and a later group is tried only when nothing in the earlier ones fits.

Why room: with Z zones a zone-balanced app of n instances has n // Z in every zone (its *share*) and one
more in n % Z of them. The shares leave no choice; only where the +1s go does. The lowest score cannot
spend that choice well: it sees one cell, not the zone, so a zone with more cells (the scale benchmark's
336/332/332) kept its spare room until the last apps, which then found room in that zone only. Sending
each +1 to the zone with the most room left after what the batch still owes every zone (water-filling)
keeps the zones' room level, and on a cluster the work fills exactly the last apps take up precisely
what is left. Processes with fewer instances than zones owe no zone anything and keep Diego's plain
lowest score (it spreads them over the cells whatever the zones' room).

*Room* is counted in instances of the item's size: the zone's free containers, memory and disk summed
over its cells, less what the batch's processes still owe the zone for their shares (a measure of how
full the zone will be, not a promise that a cell fits). Every reservation takes from it, whatever
strategy made it, and an owed instance gives back what was set aside for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..slot import CellSlot
from ..state import AuctionState
from ..work import LRPStart, TaskStart


class ZoneRoom:
    """The zones' room through one auction, kept current from the state's reservations."""

    def __init__(self, state: AuctionState, batch: Sequence[LRPStart | TaskStart]) -> None:
        """`batch`: the one `state.note_batch` was told."""
        self.state = state
        # zone -> [containers, memory, disk] left for others (free, less what is owed to the zone)
        self.left: dict[str, list[int]] = {zone: [0, 0, 0] for zone in state.zone_names}
        self._seen: list[tuple[int, int, int]] = []  # per cell: its free (containers, memory, disk) last seen
        for slot in state.slots:
            left = self.left[slot.zone]
            left[0] += slot.avail_c
            left[1] += slot.avail_m
            left[2] += slot.avail_d
            self._seen.append((slot.avail_c, slot.avail_m, slot.avail_d))
        # process guid -> (share per zone, memory, disk) and -> {zone: instances}, for processes with a share
        self.shares: dict[str, tuple[int, int, int]] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._owe(batch)
        state.on_count(self._on_count)

    def _owe(self, batch: Sequence[LRPStart | TaskStart]) -> None:
        zones = self.state.zone_names
        if len(zones) < 2:
            return
        in_batch = self.state.batch_instances  # the scheduler told the state the batch first
        sizes: dict[str, tuple[int, int]] = {}
        for item in batch:
            if isinstance(item, LRPStart) and item.process_guid not in sizes:
                sizes[item.process_guid] = (item.ask.memory_mb, item.ask.disk_mb)
        for pg, (memory_mb, disk_mb) in sizes.items():
            counts = dict(self.state.zone_instances(pg))
            share = (sum(counts.values()) + in_batch[pg]) // len(zones)
            if share < 1:
                continue
            self.shares[pg] = (share, memory_mb, disk_mb)
            self._counts[pg] = counts
            for zone in zones:
                lacking = share - counts.get(zone, 0)
                if lacking > 0:
                    left = self.left[zone]
                    left[0] -= lacking
                    left[1] -= lacking * memory_mb
                    left[2] -= lacking * disk_mb

    def _on_count(self, slot: CellSlot, process_guid: str | None, _n: int) -> None:
        """Every reservation (an LRP's or a task's) takes what it holds from its zone's room."""
        pos = slot.pos
        containers, memory, disk = self._seen[pos]
        left = self.left[slot.zone]
        left[0] -= containers - slot.avail_c
        left[1] -= memory - slot.avail_m
        left[2] -= disk - slot.avail_d
        self._seen[pos] = (slot.avail_c, slot.avail_m, slot.avail_d)
        counts = self._counts.get(process_guid) if process_guid is not None else None
        if counts is None:
            return
        before = counts.get(slot.zone, 0)
        counts[slot.zone] = before + 1
        share, memory_mb, disk_mb = self.shares[process_guid]  # type: ignore[index]
        if before < share:  # an owed instance: what it takes was set aside for it
            left[0] += 1
            left[1] += memory_mb
            left[2] += disk_mb

    def room(self, zone: str, memory_mb: int, disk_mb: int) -> int:
        """Instances of this size the zone has room for beyond what is owed to it."""
        room, memory, disk = self.left[zone]
        if memory_mb > 0 and memory // memory_mb < room:
            room = memory // memory_mb
        if disk_mb > 0 and disk // disk_mb < room:
            room = disk // disk_mb
        return room

    def zone_groups(self, process_guid: str, memory_mb: int, disk_mb: int) -> list[list[str]]:
        """The order the Diego strategy visits zones in for an instance of the process: the state's
        groups of equal count (fewest first, then by name), and for a process with a share each group
        split by room for the item (most first, then by name); zones equal in count and room stay one
        group."""
        counts = self._counts.get(process_guid)
        if counts is None:
            return self.state.zone_groups(process_guid)
        keyed = []
        for zone, (room, memory, disk) in self.left.items():  # `room`, inlined: this runs for every item
            if memory_mb > 0 and memory // memory_mb < room:
                room = memory // memory_mb
            if disk_mb > 0 and disk // disk_mb < room:
                room = disk // disk_mb
            keyed.append((counts.get(zone, 0), -room, zone))
        keyed.sort()
        groups: list[list[str]] = []
        last_count = last_room = None
        for count, negative_room, zone in keyed:
            if count == last_count and negative_room == last_room:
                groups[-1].append(zone)
            else:
                groups.append([zone])
                last_count, last_room = count, negative_room
        return groups


def zone_groups(room: ZoneRoom | None, state: AuctionState, item: LRPStart) -> list[list[str]]:
    """The zone order for the item: by room when the picker was told its batch, else Diego's groups."""
    if room is None:
        return state.zone_groups(item.process_guid)
    return room.zone_groups(item.process_guid, item.ask.memory_mb, item.ask.disk_mb)
