"""Workload → engine conversion, and the simulate output contract."""

from __future__ import annotations

import math

import pytest

from .engine import available_strategies, population_cv, simulate, to_engine
from .workload import WorkloadError, parse_workload

CONTRACT_FIELDS = {
    "workload", "strategy", "engine", "placed", "failed", "seconds", "placements_per_s", "per_cell_instances",
    "per_zone_instances", "cv_memory", "assignments", "task_assignments", "failures",
}


def example(**extra) -> dict:
    return {
        "name": "example",
        "cells": [
            {"id": "cell-0", "zone": "z0", "memory_mb": 1000, "disk_mb": 1000, "containers": 10,
             "prefill": [{"process_guid": "old-app", "index": 0, "memory_mb": 400, "disk_mb": 100}]},
            {"id": "cell-1", "zone": "z1", "memory_mb": 1000, "disk_mb": 1000, "containers": 10},
        ],
        "lrps": [{"process_guid": "web", "index": 0, "memory_mb": 200, "disk_mb": 100}],
        "tasks": [{"task_guid": "migrate", "memory_mb": 100, "disk_mb": 100}],
        **extra,
    }


def test_conversion_subtracts_prefill_and_keeps_it_running() -> None:
    inputs = to_engine(parse_workload(example()))
    c0 = inputs.cells[0]
    assert (c0.total.memory_mb, c0.available.memory_mb, c0.available.disk_mb, c0.available.containers) == (
        1000, 600, 900, 9,
    )
    assert [(r.process_guid, r.index, r.memory_mb) for r in c0.lrps] == [("old-app", 0, 400)]
    assert inputs.cells[1].available == inputs.cells[1].total
    assert inputs.lrps[0].key == ("web", 0) and inputs.tasks[0].task_guid == "migrate"


def test_conversion_maps_optional_fields() -> None:
    data = example(now=50.0)
    data["cells"][1].update(
        labels={"tier": "web"}, host={"load5": 2.0, "cores": 2}, ingress_ips=["10.0.0.1"], devices={"gpu": 1},
        volumes=[{"name": "v", "size_mb": 10}], advertised_at=40, expires_at=60, cached_blobs=["b"],
        placement_tags=["iso"], optional_placement_tags=["ssd"], volume_drivers=["nfs"], stacks=["a", "b"],
    )
    data["lrps"][0].update(
        placement_tags=["iso"],
        labels_match="tier=web",
        ingress_ip=True,
        devices=[{"kind": "gpu", "count": 1}],
        volumes=[{"name": "v", "size_mb": 5, "ephemeral": True}],
        affinity=[{"expression": "tier", "weight": 2}],
        source_blob="b",
        previous_cell="cell-1",
        total_instances=4,
        strategy="diego",
    )
    inputs = to_engine(parse_workload(data))
    c1, lrp = inputs.cells[1], inputs.lrps[0]
    assert c1.labels == {"tier": "web"} and c1.host.load5 == 2.0 and c1.host.cores == 2
    assert c1.ingress_ips == ["10.0.0.1"] and c1.devices == {"gpu": 1} and c1.volumes[0].size_mb == 10
    assert (c1.advertised_at, c1.expires_at, c1.cached_blobs) == (40, 60, frozenset({"b"}))
    assert c1.placement_tags == frozenset({"iso"}) and c1.optional_placement_tags == frozenset({"ssd"})
    assert c1.volume_drivers == frozenset({"nfs"}) and c1.stacks == ("a", "b")
    ask = lrp.ask
    assert ask.placement_tags == ("iso",) and ask.devices[0].kind == "gpu" and ask.volumes[0].ephemeral
    assert ask.affinity[0].weight == 2 and ask.source_blob == "b" and lrp.previous_cell == "cell-1"
    assert lrp.total_instances == 4 and ask.strategy == "diego" and ask.labels_match == "tier=web"


def test_output_keeps_every_contract_field() -> None:
    report = simulate(parse_workload(example()), strategy="diego", engine="reference", seed=3)
    assert CONTRACT_FIELDS <= report.keys()
    assert (report["workload"], report["strategy"], report["engine"]) == ("example", "diego", "reference")
    assert report["placed"] == 2 and report["failed"] == 0
    # web goes to the emptier cell-1; prefill counts in the per-cell and per-zone instances.
    assert report["assignments"] == [{"process_guid": "web", "index": 0, "cell_id": "cell-1"}]
    assert report["per_cell_instances"] == {"cell-0": 1, "cell-1": 1}
    assert report["per_zone_instances"] == {"z0": 1, "z1": 1}
    assert report["seconds"] >= 0 and report["placements_per_s"] >= 0


def test_cv_memory_counts_prefill_lrps_and_tasks() -> None:
    report = simulate(parse_workload(example()))
    cell_of_task = report["task_assignments"][0]["cell_id"]
    allocated = {"cell-0": 400, "cell-1": 200}
    allocated[cell_of_task] += 100
    assert report["cv_memory"] == pytest.approx(population_cv(list(allocated.values())), abs=1e-6)


def test_population_cv() -> None:
    assert population_cv([]) == 0.0
    assert population_cv([0, 0]) == 0.0
    assert population_cv([5, 5, 5]) == 0.0
    assert population_cv([1, 3]) == pytest.approx(0.5)  # std 1, mean 2
    assert math.isclose(population_cv([2, 4, 4, 4, 5, 5, 7, 9]), 2 / 5)


def test_failures_carry_error_and_detail() -> None:
    data = example()
    data["lrps"].append({"process_guid": "huge", "index": 0, "memory_mb": 5000, "disk_mb": 1})
    data["tasks"].append({"task_guid": "big-job", "memory_mb": 5000, "disk_mb": 1})
    report = simulate(parse_workload(data))
    assert report["failed"] == 2 and report["placed"] == 2
    by_key = {f.get("process_guid") or f["task_guid"]: f for f in report["failures"]}
    assert by_key["huge"]["index"] == 0 and by_key["huge"]["error"] == "insufficient resources: memory"
    assert "task_guid" not in by_key["huge"] and "process_guid" not in by_key["big-job"]
    assert by_key["big-job"]["detail"].startswith("0/2 cells fit")
    assert report["failures_by_error"] == {"insufficient resources: memory": 2}


def test_workload_now_and_config_reach_the_scheduler() -> None:
    data = example(config={"max_inflight_starts": 1})
    report = simulate(parse_workload(data))
    assert report["placed"] == 1
    assert report["failures"][0]["error"] == "waiting to start instance: reached in-flight start limit"


@pytest.mark.parametrize(
    ("strategy", "lrp_extra", "message"),
    [
        ("nope", {}, "--strategy: unknown strategy 'nope'"),
        ("diego", {"strategy": "nope"}, "lrps[0].strategy: unknown strategy 'nope'"),
    ],
)
def test_unknown_strategies_name_the_field(strategy: str, lrp_extra: dict, message: str) -> None:
    data = example()
    data["lrps"][0].update(lrp_extra)
    with pytest.raises(WorkloadError) as info:
        simulate(parse_workload(data), strategy=strategy)
    assert str(info.value).startswith(message)


def test_bad_objective_expression_names_the_field() -> None:
    pytest.importorskip("common.objective")
    data = example()
    data["lrps"][0]["objective"] = "((("
    with pytest.raises(WorkloadError, match=r"^lrps\[0\]\.objective: "):
        simulate(parse_workload(data))


def test_every_registered_strategy_runs_the_example() -> None:
    for strategy in available_strategies():
        report = simulate(parse_workload(example()), strategy=strategy)
        assert report["placed"] + report["failed"] == 2, strategy


def test_the_instances_of_an_app_share_one_ask_and_differing_fields_get_their_own() -> None:
    lrps = [{"process_guid": "web", "index": i, "memory_mb": 64, "disk_mb": 64} for i in range(3)]
    lrps.append({"process_guid": "web", "index": 3, "memory_mb": 64, "disk_mb": 64, "stack": "windows"})
    cells = [{"id": "c", "zone": "z", "memory_mb": 1024, "disk_mb": 1024, "containers": 10}]
    first, second, third, other = to_engine(parse_workload({"cells": cells, "lrps": lrps})).lrps
    assert first.ask is second.ask is third.ask
    assert other.ask.stack == "windows" and first.ask.stack == "cflinuxfs4"
