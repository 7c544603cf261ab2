"""The order in which one auction's work is placed (Diego's batch ordering).

1. Index-0 LRP instances, memory descending: every app gets its first instance before any gets a second.
2. Tasks, memory descending.
3. The remaining LRP instances, cycling through the LRPs in decreasing load (memory × instances in this
   batch, ties by process guid): each cycle takes one more instance, lowest index first, of every LRP
   that still has instances left.

Sorts are stable, so equal keys keep the order the work arrived in. Duplicate (process_guid, index) and
task_guid entries are dropped, keeping the first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .types import LRPStart, TaskStart


def dedupe_lrps(lrps: Sequence[LRPStart]) -> list[LRPStart]:
    seen: set[tuple[str, int]] = set()
    unique = []
    for lrp in lrps:
        if lrp.key not in seen:
            seen.add(lrp.key)
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


def cycle_by_load(lrps: Sequence[LRPStart]) -> Iterator[LRPStart]:
    groups: dict[str, list[LRPStart]] = {}
    for lrp in lrps:
        groups.setdefault(lrp.process_guid, []).append(lrp)
    for members in groups.values():
        members.sort(key=lambda lrp: lrp.index)
    ordered = sorted(groups.values(), key=lambda m: (-m[0].memory_mb * len(m), m[0].process_guid))
    longest = max((len(m) for m in ordered), default=0)
    for round_ in range(longest):
        for members in ordered:
            if round_ < len(members):
                yield members[round_]


def order_batch(lrps: Sequence[LRPStart], tasks: Sequence[TaskStart]) -> list[LRPStart | TaskStart]:
    unique = dedupe_lrps(lrps)
    first = sorted((lrp for lrp in unique if lrp.index == 0), key=lambda lrp: -lrp.memory_mb)
    rest = [lrp for lrp in unique if lrp.index != 0]
    ordered_tasks = sorted(dedupe_tasks(tasks), key=lambda t: -t.memory_mb)
    return [*first, *ordered_tasks, *cycle_by_load(rest)]
