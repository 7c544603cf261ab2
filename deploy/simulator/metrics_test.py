"""The summary numbers on a tiny example worked out by hand."""

from __future__ import annotations

import math

import pytest

from .metrics import Outcome, az_skews, compatible, percentile, summarise, wait_summary
from .sim_input import SimInput, app, cell


def tiny() -> SimInput:
    # z0: a (1000 MB, runs old/0 of 100 MB), b (1000 MB); z1: c (1000 MB), d (1000 MB, tag "gpu" required)
    cells = [
        cell("a", "z0", 1000, 1000, 10, [("old", 0, 100, 10)]),
        cell("b", "z0", 1000, 1000, 10),
        cell("c", "z1", 1000, 1000, 10),
        cell("d", "z2", 1000, 1000, 10, placement_tags=["gpu"]),
    ]
    apps = [app("web", 4, 100, 10), app("ml", 2, 200, 10, placement_tags=["gpu"])]
    return SimInput("tiny", cells, apps)


def outcome() -> Outcome:
    # web: 3 on z0 (a, a, b), 1 on z1 (c); ml: both on d; old/0 stays on a.
    return Outcome(
        strategy="hand", transport="inproc",
        instances=[("old", 0, "a", 100), ("web", 0, "a", 100), ("web", 1, "a", 100), ("web", 2, "b", 100),
                   ("web", 3, "c", 100), ("ml", 0, "d", 200), ("ml", 1, "d", 200)],
        prefill_keys={("old", 0)},
        waits=[0.1, 0.2, 0.3, 0.4, 0.5, 1.0],
        seconds=2.0, rounds=1, communications={"bbs": 1, "rep_state": 4, "rep_work": 4},
    )


def test_compatibility_follows_diego_s_tag_rule() -> None:
    assert compatible(["s"], [], [], "s", [])
    assert not compatible(["s"], ["gpu"], [], "s", [])  # the cell requires a tag the app lacks
    assert compatible(["s"], ["gpu"], [], "s", ["gpu"])
    assert compatible(["s"], [], ["ssd"], "s", ["ssd"])  # optional tags admit tagged and untagged apps
    assert not compatible(["s"], [], [], "s", ["ssd"])
    assert not compatible(["t"], [], [], "s", [])


def test_az_skew_counts_only_zones_the_app_may_use() -> None:
    skews = az_skews(tiny(), outcome())
    # web may use z0 and z1 (d requires "gpu"): 3 vs 1 -> skew 2. ml may use only z2: skew 0.
    assert skews == {"web": 2, "ml": 0}


def test_summary_numbers_by_hand() -> None:
    summary = summarise(tiny(), outcome())
    # allocated memory per cell: a 300, b 100, c 100, d 400 -> mean 225
    mean = 225
    std = math.sqrt(((300 - mean) ** 2 + (100 - mean) ** 2 * 2 + (400 - mean) ** 2) / 4)
    assert summary["cv_memory"] == pytest.approx(std / mean, abs=1e-6)
    assert (summary["worst_az_skew"], summary["worst_az_skew_app"]) == (2, "web")
    assert summary["apps_with_az_skew_over_1"] == 1
    assert summary["az_skew_histogram"] == {0: 1, 2: 1}
    assert (summary["min_instances_per_cell"], summary["max_instances_per_cell"]) == (1, 3)
    assert summary["per_zone_instances"] == {"z0": 4, "z1": 1, "z2": 2}
    assert summary["per_cell"][0] == {"cell_id": "a", "zone": "z0", "memory_mb": 1000, "allocated_mb": 300,
                                      "prefill_mb": 100, "instances": 3}
    assert summary["app_zone_split"] == {"web": {"z0": 3, "z1": 1}, "ml": {"z2": 2}}
    assert (summary["placed"], summary["failed"], summary["communications"], summary["rounds"]) == (
        6,
        0,
        9,
        1,
    )
    assert summary["placements_per_s"] == 3.0
    assert summary["communications_per_instance"] == 1.5


def test_wait_summary_percentiles_and_histogram() -> None:
    waits = [0.1, 0.2, 0.3, 0.4, 0.5, 1.0]
    summary = wait_summary(waits, bins=9)
    assert (summary["min"], summary["max"]) == (0.1, 1.0)
    assert summary["mean"] == pytest.approx(2.5 / 6, abs=1e-6)
    assert summary["p50"] == pytest.approx(0.35)  # between the 3rd and 4th of six
    assert summary["p95"] == pytest.approx(0.875)  # 0.5 + 0.75 * (1.0 - 0.5)
    assert summary["histogram"]["counts"] == [1, 1, 1, 1, 1, 0, 0, 0, 1]
    assert summary["histogram"]["edges"][0] == 0.1 and summary["histogram"]["edges"][-1] == pytest.approx(1.0)
    assert sum(summary["histogram"]["counts"]) == len(waits)


def test_wait_summary_degenerate_cases() -> None:
    assert wait_summary([])["histogram"] == {"edges": [], "counts": []}
    same = wait_summary([0.5, 0.5, 0.5])
    assert same["histogram"] == {"edges": [0.475, 0.525], "counts": [3]} and same["p95"] == 0.5
    assert percentile([], 0.5) == 0.0 and percentile([2.0], 0.95) == 2.0


def test_failures_and_tasks_count() -> None:
    sim = tiny()
    result = outcome()
    result.failures = [{"process_guid": "web", "index": 9, "error": "insufficient resources: memory",
                        "detail": ""}]
    result.tasks = [("job", "b", 500)]
    summary = summarise(sim, result)
    assert summary["failed"] == 1 and summary["failures_by_error"] == {"insufficient resources: memory": 1}
    assert summary["per_cell"][1]["allocated_mb"] == 600  # web/2 and the task
