"""The scenario registry: every scenario builds, repeats for a seed, round-trips as a workload file, and has
the shape its description promises."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from .engine import available_strategies
from .scenarios import SCENARIOS, scenario, split_counts
from .sim_input import from_workload, to_workload
from .workload import parse_workload

REQUIRED = {"cold-start-small", "cold-start-large", "imbalanced", "az-distribution", "low-memory",
            "dea-example", "loadmark-example", "mixed", "scale-250k"}
SMALL = sorted(set(SCENARIOS) - {"scale-250k"})


def test_the_issue_s_scenarios_are_all_there_with_one_line_descriptions() -> None:
    assert REQUIRED <= set(SCENARIOS)
    offered = set(available_strategies())
    for s in SCENARIOS.values():
        assert s.description and "\n" not in s.description and len(s.description) < 110, s.name
        assert s.strategies and set(s.strategies) <= offered, s.name


def test_unknown_scenario_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown scenario 'nope' \(expected one of cold-start-small, "):
        scenario("nope")


@pytest.mark.parametrize("name", SMALL)
def test_scenarios_repeat_for_a_seed_and_round_trip_as_workload_files(name: str) -> None:
    first = SCENARIOS[name].build(3)
    again = SCENARIOS[name].build(3)
    assert to_workload(first) == to_workload(again)
    assert first.name == name and first.instances > 0 and first.cells
    # The workload file is the contract: it validates and reads back as the same apps and cells.
    back = from_workload(parse_workload(to_workload(first)))
    assert back.instances == first.instances and len(back.tasks) == len(first.tasks)
    assert [c.id for c in back.cells] == [c.id for c in first.cells]
    assert back.prefill_instances == first.prefill_instances
    assert sorted((a.process_guid, a.indices) for a in back.apps) == sorted((a.process_guid, a.indices)
                                                                           for a in first.apps)


def test_randomised_scenarios_change_with_the_seed() -> None:
    for name in ("cold-start-small", "az-distribution", "mixed"):
        assert to_workload(SCENARIOS[name].build(1)) != to_workload(SCENARIOS[name].build(2)), name


def test_diego_shapes() -> None:
    small = SCENARIOS["cold-start-small"].build(0)
    assert len(small.cells) == 100 and small.instances == 1000 and small.prefill_instances == 0
    assert {(c.memory_mb, c.disk_mb, c.containers) for c in small.cells} == {(100, 100, 100)}
    assert {a.memory_mb for a in small.apps} == {1, 2, 4}

    large = SCENARIOS["cold-start-large"].build(0)
    assert Counter(a.memory_mb for a in large.apps for _ in a.indices) == {1: 7200, 2: 800, 4: 200}

    imbalanced = SCENARIOS["imbalanced"].build(0)
    assert sorted(len(c.prefill) for c in imbalanced.cells) == [0] * 5 + [50] * 95
    assert imbalanced.instances == 500 and len(imbalanced.apps) == 500


def test_az_distribution_has_uneven_zones_and_low_memory_does_not_fit() -> None:
    az = SCENARIOS["az-distribution"].build(0)
    assert sorted(Counter(c.zone for c in az.cells).values()) == [2, 4, 8]
    assert all(3 <= len(a.indices) <= 12 for a in az.apps)

    low = SCENARIOS["low-memory"].build(0)
    free = sum(c.memory_mb - c.prefill_memory_mb for c in low.cells)
    wanted = sum(a.memory_mb * len(a.indices) for a in low.apps)
    assert free < wanted
    assert all(c.prefill_memory_mb / c.memory_mb > 0.85 for c in low.cells)


def test_loadmark_example_hosts_carry_metrics() -> None:
    sim = SCENARIOS["loadmark-example"].build(0)
    assert all(c.host is not None for c in sim.cells)
    assert {c.id for c in sim.cells if c.host.load5 / (2 * c.host.cores) > 1} == {"host-overloaded"}


def test_scale_250k_is_1000_cells_5000_apps_250000_instances() -> None:
    sim = SCENARIOS["scale-250k"].build(0)
    assert len(sim.cells) == 1000 and len(sim.apps) == 5000 and sim.instances == 250_000
    assert {c.zone for c in sim.cells} == {"z0", "z1", "z2"}
    assert all(1 <= len(a.indices) <= 99 for a in sim.apps)
    memory = sum(a.memory_mb * len(a.indices) for a in sim.apps)
    assert memory < 0.9 * sum(c.memory_mb for c in sim.cells)  # it fits, with room to balance


def test_split_counts_adds_up_within_bounds() -> None:
    counts = split_counts(random.Random(1), 50, 1234, 1, 60)
    assert sum(counts) == 1234 and min(counts) >= 1 and max(counts) <= 60
    with pytest.raises(ValueError):
        split_counts(random.Random(1), 10, 1000, 1, 99)
