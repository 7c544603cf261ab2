"""The room check a rep (and the simulator's reps) take work by."""

from __future__ import annotations

import pytest

from .admission import shortage


def test_work_that_fits_exactly_is_admitted() -> None:
    assert shortage(free_memory_mb=100, free_disk_mb=50, free_containers=1, memory_mb=100, disk_mb=50) == ""


@pytest.mark.parametrize(
    ("free", "expected"),
    [
        ((99, 50, 1), "insufficient resources: memory"),
        ((100, 49, 1), "insufficient resources: disk"),
        ((100, 50, 0), "insufficient resources: containers"),
        ((0, 0, 0), "insufficient resources: containers, disk, memory"),
    ],
)
def test_a_refusal_names_every_resource_short(free: tuple[int, int, int], expected: str) -> None:
    memory, disk, containers = free
    assert shortage(memory, disk, containers, memory_mb=100, disk_mb=50) == expected
