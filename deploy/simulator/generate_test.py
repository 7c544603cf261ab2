"""Workload generators: valid files, deterministic for a seed, the shapes their names promise."""

from __future__ import annotations

from collections import Counter

import pytest

from .generate import GENERATORS, generate
from .workload import parse_workload

SMALL = {"cells": 12, "zones": 3, "instances": 300}


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generated_workloads_validate_and_repeat_for_a_seed(name: str) -> None:
    first = generate(name, seed=5, **SMALL)
    parse_workload(first)
    assert generate(name, seed=5, **SMALL) == first
    assert generate(name, seed=6, **SMALL) != first


def test_unknown_generator() -> None:
    with pytest.raises(ValueError, match="unknown generator 'nope'"):
        generate("nope")


def test_mixed_is_production_like() -> None:
    workload = parse_workload(generate("mixed", cells=40, zones=3, instances=1500, seed=1))
    assert len(workload.cells) == 40 and len({c.zone for c in workload.cells}) == 3
    assert len(workload.lrps) == 1500
    sizes = {lrp.memory_mb for lrp in workload.lrps}
    assert min(sizes) >= 64 and max(sizes) <= 2048 and len(sizes) >= 4
    per_app = Counter(lrp.process_guid for lrp in workload.lrps)
    assert max(per_app.values()) >= 10 * sorted(per_app.values())[len(per_app) // 2]  # a long tail
    assert any(c.prefill for c in workload.cells)
    assert workload.tasks
    assert any(c.placement_tags for c in workload.cells)
    assert any(lrp.placement_tags for lrp in workload.lrps)


def test_cold_start_small_is_diegos() -> None:
    workload = parse_workload(generate("cold-start-small", cells=20, seed=0))
    assert len(workload.lrps) == 200  # Diego's pairing for 20 cells
    assert {(c.memory_mb, c.disk_mb, c.containers) for c in workload.cells} == {(100, 100, 100)}
    assert [c.zone for c in workload.cells[:4]] == ["Z0", "Z1", "Z0", "Z1"]
    assert {(lrp.index, lrp.memory_mb, lrp.disk_mb) for lrp in workload.lrps} == {(0, 1, 1)}
    assert len({lrp.process_guid for lrp in workload.lrps}) == 200


def test_cold_start_large_mixes_unique_apps_and_colours() -> None:
    workload = parse_workload(generate("cold-start-large", cells=25, seed=0))
    by_size = Counter(lrp.memory_mb for lrp in workload.lrps)
    assert by_size == {1: 72 * 25, 2: 8 * 25, 4: 2 * 25}
    coloured = [lrp for lrp in workload.lrps if not lrp.process_guid.startswith("app-")]
    assert Counter(lrp.memory_mb for lrp in coloured) == {1: 900, 2: 100, 4: 25}  # half of each size
    assert len({lrp.process_guid for lrp in coloured}) <= 12  # 4 colours × 3 sizes


@pytest.mark.parametrize(
    ("name", "sizes"), [("benchmark", {128, 256, 512, 1024}), ("benchmark-fits", {64, 128, 256, 512})]
)
def test_benchmark_shapes(name: str, sizes: set[int]) -> None:
    workload = parse_workload(generate(name, cells=30, zones=3, instances=3000, seed=2))
    assert {(c.memory_mb, c.disk_mb, c.containers) for c in workload.cells} == {(32768, 65536, 250)}
    assert len(workload.lrps) == 3000
    assert {lrp.memory_mb for lrp in workload.lrps} <= sizes
    assert max(Counter(lrp.process_guid for lrp in workload.lrps).values()) <= 100
