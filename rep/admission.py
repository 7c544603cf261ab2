"""Whether work still fits a cell when it arrives: the rule a rep takes work by (rep/cell.py), and the
simulator's reps too (deploy/simulator/transport_inproc.py), so a simulation refuses exactly what a rep
would, in the rep's words.

The auctioneer placed the work on a bid that may be stale by now (another auctioneer's work, a late
claim), so the rep checks again: one container, the memory and the disk, against what it has free.
"""

from __future__ import annotations

INSUFFICIENT_RESOURCES = "insufficient resources"


def shortage(
    free_memory_mb: int, free_disk_mb: int, free_containers: int, memory_mb: int, disk_mb: int
) -> str:
    """Why an instance or task of `memory_mb` and `disk_mb` does not fit what a cell has free, naming every
    resource short in the engine's order (`insufficient resources: containers, disk`); empty if it fits."""
    containers_ok = free_containers >= 1
    disk_ok = disk_mb <= free_disk_mb
    memory_ok = memory_mb <= free_memory_mb
    if containers_ok and disk_ok and memory_ok:  # the common case, once per item a rep takes
        return ""
    short = [
        name
        for name, ok in (("containers", containers_ok), ("disk", disk_ok), ("memory", memory_ok))
        if not ok
    ]
    return f"{INSUFFICIENT_RESOURCES}: {', '.join(short)}"
