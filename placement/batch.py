"""The order in which one auction's work is placed (Diego's batch ordering, with each app's last partial
round of zones held back to the end).

1. Index-0 LRP instances, memory descending: every app gets its first instance before any gets a second.
2. Tasks, memory descending.
3. The remaining LRP instances that complete rounds of the zones, cycling through the LRPs in decreasing
   load (memory × instances in this part, ties by process guid): each cycle takes one more instance,
   lowest index first, of every LRP that still has instances left.
4. Each LRP's last partial round: its final (instances on the cells + instances in the batch) mod zones
   instances, apps with more of them first (then by load, then guid), an app's consecutively.

Why step 4: with Z zones, a zone-balanced app of n instances has n // Z in every zone and one more in
n % Z of them. The instances of complete rounds have no choice (each goes to the zone still short of
the round), so where they go is fixed; only the last partial round chooses. Placed last, those choices
see what the whole batch's complete rounds left (the Diego strategy sends each to the equal-count zone
with the most room, `strategies.zone_room.ZoneRoom`), and on a cluster the batch fills exactly they
take up precisely what is left. Placed mid-batch, they were made before the remaining rounds had taken
their share, and the last apps of a full cluster were left with room in one zone only. An app's
partial round goes in one piece, longest first, because its instances must go to different zones
while single ones can go anywhere: the flexible work comes last. With one zone there is no partial
round and the order is Diego's: steps 1-3.

Sorts are stable, so equal keys keep the order the work arrived in. Duplicate (process_guid, index) and
task_guid entries are dropped, keeping the first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from .work import LRPStart, TaskStart


def dedupe_lrps(lrps: Sequence[LRPStart]) -> list[LRPStart]:
    seen: set[tuple[str, int]] = set()
    unique = []
    for lrp in lrps:
        key = (lrp.process_guid, lrp.index)  # `lrp.key`, without a property call per instance
        if key not in seen:
            seen.add(key)
            unique.append(lrp)
    return unique


def dedupe_tasks(tasks: Sequence[TaskStart]) -> list[TaskStart]:
    seen: set[str] = set()
    unique = []
    for task in tasks:
        if task.task_guid not in seen:
            seen.add(task.task_guid)
            unique.append(task)
    return unique


def by_process(lrps: Iterable[LRPStart]) -> dict[str, list[LRPStart]]:
    """Instances grouped by process guid (in order of first arrival), each group lowest index first."""
    groups: dict[str, list[LRPStart]] = {}
    for lrp in lrps:
        groups.setdefault(lrp.process_guid, []).append(lrp)
    for members in groups.values():
        members.sort(key=lambda lrp: lrp.index)
    return groups


def cycle_by_load(groups: Iterable[list[LRPStart]]) -> Iterator[LRPStart]:
    """Step 3 over each process's instances (lowest index first, as `by_process` groups them)."""
    ordered = sorted(
        (m for m in groups if m), key=lambda m: (-m[0].ask.memory_mb * len(m), m[0].process_guid)
    )
    longest = max((len(m) for m in ordered), default=0)
    for round_ in range(longest):
        for members in ordered:
            if round_ < len(members):
                yield members[round_]


def _without_index_0(members: list[LRPStart]) -> list[LRPStart]:
    """A group (lowest index first) less its index-0 instance, which step 1 places."""
    return [lrp for lrp in members if lrp.index != 0] if members and members[0].index <= 0 else members


def split_last_rounds(
    groups: dict[str, list[LRPStart]],
    zones: int,
    placed: Callable[[str], int] | None = None,
) -> tuple[list[list[LRPStart]], list[LRPStart]]:
    """(each process's instances completing rounds of the zones, the last partial rounds in placing
    order), from `by_process` groups; index-0 instances left out of both (step 1 places them).

    An app's partial round is its last (placed + in batch) mod `zones` instances of this batch, `placed`
    giving how many of the process the cells already hold (none when not given).
    """
    if zones <= 1:
        return [_without_index_0(members) for members in groups.values()], []
    rounds: list[list[LRPStart]] = []
    partial: list[tuple[int, int, int, str, list[LRPStart]]] = []
    for guid, members in groups.items():
        n = len(members)
        tail = min(n, ((placed(guid) if placed else 0) + n) % zones)
        rounds.append(_without_index_0(members[: n - tail] if tail else members))
        if tail:
            # most constrained first: the longest partial rounds, and of those the ones whose index 0 is
            # already placed (in step 1: their rest must avoid its zone)
            started = 0 if members[n - tail].index == 0 else 1
            partial.append((-tail, started, -members[0].ask.memory_mb * n, guid, members[n - tail:]))
    partial.sort(key=lambda p: p[:4])
    return rounds, [lrp for *_, members in partial for lrp in members if lrp.index != 0]


def order_batch(lrps: Sequence[LRPStart], tasks: Sequence[TaskStart], zones: int = 1,
                placed: Callable[[str], int] | None = None) -> list[LRPStart | TaskStart]:
    """The placing order; `zones` is the auction's number of zones, `placed` the instances each process
    already has on the cells (both only decide which instances form the last partial rounds)."""
    unique = dedupe_lrps(lrps)
    first = sorted((lrp for lrp in unique if lrp.index == 0), key=lambda lrp: -lrp.ask.memory_mb)
    rounds, last = split_last_rounds(by_process(unique), zones, placed)
    ordered_tasks = sorted(dedupe_tasks(tasks), key=lambda t: -t.ask.memory_mb)
    return [*first, *ordered_tasks, *cycle_by_load(rounds), *last]
