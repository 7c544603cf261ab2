"""What a process-executor cell offers when the operator does not say: the machine, as Diego's rep's "auto".

Memory: MemTotal of /proc/meminfo less `--memory-reserve-mb` (default 0, as Diego). Disk: the size (not
the free space: instances come and go, what they may use at most is the filesystem) of the filesystem
holding the instance directories, less `--disk-reserve-mb` (default 1024, for the rep's own logs and
what else lives there). A rep hosting several cells divides both evenly between them. A value the
operator gives (`--memory-mb`, `--disk-mb`) is each cell's, as given.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

MIB = 1024 * 1024
MEMINFO = Path("/proc/meminfo")


class CapacityError(ValueError):
    """The machine leaves nothing to offer once the reserve is set aside (one line, naming the setting)."""


class Capacity(NamedTuple):
    memory_mb: int
    disk_mb: int


def meminfo_total_mb(text: str) -> int:
    """MemTotal from the text of /proc/meminfo ("MemTotal:  16305548 kB"), in MiB."""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name == "MemTotal":
            value, _, unit = rest.strip().partition(" ")
            if unit.strip() != "kB":
                raise ValueError(f"MemTotal in {unit.strip()!r}, expected kB")
            return int(value) // 1024
    raise ValueError("no MemTotal line")


def filesystem_mb(path: Path) -> int:
    """The size of the filesystem holding `path` (or, while it does not exist yet, its nearest existing
    ancestor), in MiB."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    fs = os.statvfs(probe)
    return fs.f_blocks * fs.f_frsize // MIB


def cell_capacity(
    *,
    memory_mb: int | None,
    disk_mb: int | None,
    instances_dir: Path,
    cells: int = 1,
    memory_reserve_mb: int = 0,
    disk_reserve_mb: int = 1024,
    meminfo: Path = MEMINFO,
) -> Capacity:
    """Each cell's memory and disk: as given, else the machine's share (see the module's doc)."""
    if memory_mb is None:
        total = meminfo_total_mb(meminfo.read_text())
        memory_mb = _share("memory_reserve_mb", total, memory_reserve_mb, cells, f"{total} MB of memory")
    if disk_mb is None:
        total = filesystem_mb(instances_dir)
        disk_mb = _share("disk_reserve_mb", total, disk_reserve_mb, cells,
                         f"the {total} MB filesystem holding {instances_dir}")
    return Capacity(memory_mb, disk_mb)


def _share(setting: str, total_mb: int, reserve_mb: int, cells: int, what: str) -> int:
    share = (total_mb - reserve_mb) // cells
    if share < 1:
        per = f" for {cells} cells" if cells > 1 else ""
        raise CapacityError(f"{setting}: {reserve_mb} MB leaves nothing of {what}{per} "
                            f"(give --{setting.removesuffix('_reserve_mb')}-mb, or a smaller reserve)")
    return share
