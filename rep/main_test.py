"""What a rep's cells offer, from its settings: given, the sim's defaults, or the machine's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .capacity import MIB, meminfo_total_mb
from .main import ConfigError, cell_configs
from .settings import SIM_DEFAULT_DISK_MB, SIM_DEFAULT_MEMORY_MB, RepSettings


def offered(**settings: object) -> list[tuple[int, int]]:
    configs = cell_configs(RepSettings(**settings), "http://127.0.0.1:1800", "rep", insecure=True)
    return [(c.memory_mb, c.disk_mb) for c in configs]


def test_a_process_cell_offers_the_machine_less_the_reserves(tmp_path: Path) -> None:
    fs = os.statvfs(tmp_path)
    memory = meminfo_total_mb(Path("/proc/meminfo").read_text())
    disk = fs.f_blocks * fs.f_frsize // MIB
    assert offered(data_dir=tmp_path) == [(memory, disk - 1024)]
    assert offered(data_dir=tmp_path, memory_reserve_mb=100, disk_reserve_mb=0) == [(memory - 100, disk)]
    assert offered(data_dir=tmp_path, memory_mb=512, disk_mb=2048) == [(512, 2048)]


def test_simulated_cells_keep_their_defaults(tmp_path: Path) -> None:
    assert (
        offered(data_dir=tmp_path, executor="sim", cells=3)
        == [(SIM_DEFAULT_MEMORY_MB, SIM_DEFAULT_DISK_MB)] * 3
    )


def test_a_reserve_larger_than_the_machine_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^disk_reserve_mb: 1000000000 MB leaves nothing of the "):
        offered(data_dir=tmp_path, disk_reserve_mb=10**9)
