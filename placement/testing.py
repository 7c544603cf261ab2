"""Helpers for the engine's tests: work made field by field, cells holding instances, float comparison.

`lrp_start` and `task_start` take an instance's ask field by field (the order LRPStart's fields once had),
so a test says `lrp_start("web", 0, 512, 1024, stack="windows")`; every call makes its own `Ask`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable

from .ask import DEFAULT_STACK, AffinityRule, Ask, DeviceRequest, VolumeRequest
from .cell_offer import CellOffer, Resources, RunningInstance
from .rebalance import Placed
from .work import LRPStart, TaskStart


def lrp_start(
    process_guid: str,
    index: int,
    memory_mb: int,
    disk_mb: int,
    stack: str = DEFAULT_STACK,
    placement_tags: Iterable[str] = (),
    volume_drivers: Iterable[str] = (),
    strategy: str | None = None,
    objective: str | None = None,
    total_instances: int = 0,
    source_blob: str | None = None,
    labels_match: str = "",
    volumes: Iterable[VolumeRequest] = (),
    ingress_ip: bool = False,
    devices: Iterable[DeviceRequest] = (),
    affinity: Iterable[AffinityRule] = (),
    previous_cell: str | None = None,
) -> LRPStart:
    ask = Ask(
        memory_mb, disk_mb, stack, tuple(placement_tags), tuple(volume_drivers), labels_match, tuple(volumes),
        ingress_ip, tuple(devices), tuple(affinity), strategy, objective, source_blob,
    )
    return LRPStart(process_guid, index, ask, total_instances, previous_cell)


def task_start(
    task_guid: str,
    memory_mb: int,
    disk_mb: int,
    stack: str = DEFAULT_STACK,
    placement_tags: Iterable[str] = (),
    volume_drivers: Iterable[str] = (),
) -> TaskStart:
    return TaskStart(task_guid, Ask(memory_mb, disk_mb, stack, tuple(placement_tags), tuple(volume_drivers)))


def holding(cells: list[CellOffer], placed: list[Placed], requests: dict[str, LRPStart]) -> list[CellOffer]:
    """The cells with these instances on them: their resources taken, the instances listed."""
    by_id = {c.cell_id: c for c in cells}
    for p in placed:
        cell, ask = by_id[p.cell_id], requests[p.process_guid].ask
        cell.available = Resources(
            cell.available.memory_mb - ask.memory_mb,
            cell.available.disk_mb - ask.disk_mb,
            cell.available.containers - 1,
        )
        cell.lrps.append(RunningInstance(p.process_guid, p.index, ask.memory_mb, ask.disk_mb))
    return cells


def same_bits(scalars: Iterable[object], array: Iterable[object]) -> bool:
    """Every value identical to the last bit; any NaN matches any NaN (its payload carries no meaning)."""
    def key(x: object) -> str:
        x = float(x)  # type: ignore[arg-type]
        return "nan" if math.isnan(x) else struct.pack("<d", x).hex()
    return [key(a) for a in array] == [key(s) for s in scalars]
