"""A cell's capacity from the machine: /proc/meminfo and statvfs, reserves, cells."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .capacity import MIB, Capacity, CapacityError, cell_capacity, filesystem_mb, meminfo_total_mb

MEMINFO = """MemTotal:       16305548 kB
MemFree:          901232 kB
MemAvailable:    9044572 kB
SwapTotal:       2097148 kB
"""


def fake_meminfo(tmp_path: Path, text: str = MEMINFO) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(text)
    return path


def statvfs_mb(path: Path) -> int:
    fs = os.statvfs(path)
    return fs.f_blocks * fs.f_frsize // MIB


def test_meminfo_total_in_mib() -> None:
    assert meminfo_total_mb(MEMINFO) == 16305548 // 1024 == 15923
    with pytest.raises(ValueError, match="no MemTotal"):
        meminfo_total_mb("MemFree: 1 kB\n")


def test_this_machines_meminfo_parses() -> None:
    pages = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // MIB
    assert abs(meminfo_total_mb(Path("/proc/meminfo").read_text()) - pages) <= 1


def test_the_filesystem_size_not_its_free_space(tmp_path: Path) -> None:
    fs = os.statvfs(tmp_path)
    assert filesystem_mb(tmp_path) == fs.f_blocks * fs.f_frsize // MIB
    assert filesystem_mb(tmp_path / "not" / "made" / "yet") == filesystem_mb(tmp_path), "its nearest ancestor"


def test_auto_is_the_machine_less_the_reserves(tmp_path: Path) -> None:
    got = cell_capacity(memory_mb=None, disk_mb=None, instances_dir=tmp_path, memory_reserve_mb=923,
                        disk_reserve_mb=1024, meminfo=fake_meminfo(tmp_path))
    assert got == Capacity(15923 - 923, statvfs_mb(tmp_path) - 1024)


def test_the_defaults_reserve_no_memory_and_a_gigabyte_of_disk(tmp_path: Path) -> None:
    got = cell_capacity(memory_mb=None, disk_mb=None, instances_dir=tmp_path, meminfo=fake_meminfo(tmp_path))
    assert got == Capacity(15923, statvfs_mb(tmp_path) - 1024)


def test_the_machine_is_shared_evenly_between_cells(tmp_path: Path) -> None:
    got = cell_capacity(memory_mb=None, disk_mb=None, instances_dir=tmp_path, cells=4, memory_reserve_mb=3,
                        disk_reserve_mb=0, meminfo=fake_meminfo(tmp_path))
    assert got == Capacity((15923 - 3) // 4, statvfs_mb(tmp_path) // 4)


def test_given_values_are_each_cells_and_nothing_is_read(tmp_path: Path) -> None:
    got = cell_capacity(memory_mb=512, disk_mb=2048, instances_dir=tmp_path, cells=4,
                        meminfo=tmp_path / "no-such-file")
    assert got == Capacity(512, 2048)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"memory_reserve_mb": 15923}, "memory_reserve_mb: 15923 MB leaves nothing of 15923 MB of memory "
                                   "(give --memory-mb, or a smaller reserve)"),
    ({"memory_reserve_mb": 15920, "cells": 4}, "memory_reserve_mb: 15920 MB leaves nothing of 15923 MB of "
                                               "memory for 4 cells"),
    ({"disk_reserve_mb": 10**9}, "disk_reserve_mb: 1000000000 MB leaves nothing of the "),
])
def test_a_reserve_that_leaves_nothing_is_refused_naming_it(
    tmp_path: Path, kwargs: dict, message: str
) -> None:
    with pytest.raises(CapacityError) as raised:
        cell_capacity(memory_mb=None, disk_mb=None, instances_dir=tmp_path, meminfo=fake_meminfo(tmp_path),
                      **kwargs)
    assert str(raised.value).startswith(message)
