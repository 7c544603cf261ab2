"""`vendue simulate`'s core: a validated workload converted to engine types, scheduled, and summarised.

The CLI (simulate_cmd.py) does the reading, printing and exit codes; this module is plain functions so
tests and the benchmark can call it directly. Output fields follow docs/workload-format.md; fields beyond
the contract are additions (`detail` on failures, per-kind counts, `failures_by_error`).
"""

from __future__ import annotations

import math
import operator
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from common.models import PlacementFields
from placement import schedule
from placement.ask import STRATEGIES, Ask
from placement.cell_offer import CellOffer, Resources, RunningInstance, Volume, host_metrics_from
from placement.strategies import pickers
from placement.types import AuctionResult, SchedulerConfig
from placement.wire import ask_of
from placement.work import LRPStart, TaskStart

from .workload import CellSpec, LRPSpec, TaskSpec, Workload, WorkloadError


@dataclass(slots=True)
class EngineInput:
    cells: list[CellOffer]
    lrps: list[LRPStart]
    tasks: list[TaskStart]


# --- conversion -------------------------------------------------------------------------------------


def cell_to_engine(spec: CellSpec) -> CellOffer:
    total = Resources(spec.memory_mb, spec.disk_mb, spec.containers)
    available = Resources(
        spec.memory_mb - spec.prefill_memory_mb,
        spec.disk_mb - spec.prefill_disk_mb,
        spec.containers - spec.prefill_containers,
    )
    host = None if spec.host is None else host_metrics_from(spec.host)
    return CellOffer(
        cell_id=spec.id,
        zone=spec.zone,
        total=total,
        available=available,
        stacks=spec.all_stacks,
        placement_tags=frozenset(spec.placement_tags),
        optional_placement_tags=frozenset(spec.optional_placement_tags),
        volume_drivers=frozenset(spec.volume_drivers),
        labels=dict(spec.labels),
        starting_containers=spec.starting_containers,
        lrps=[
            RunningInstance(p.process_guid, p.index, p.memory_mb, p.disk_mb, p.delayed_shutdown)
            for p in spec.prefill
        ],
        tasks=[t.task_guid for t in spec.prefill_tasks],
        host=host,
        volumes=[Volume(v.name, v.size_mb, dict(v.labels), v.ephemeral, v.holder) for v in spec.volumes],
        ingress_ips=list(spec.ingress_ips),
        devices=dict(spec.devices),
        advertised_at=spec.advertised_at,
        expires_at=spec.expires_at,
        cached_blobs=frozenset(spec.cached_blobs),
    )


def lrp_to_engine(spec: LRPSpec, asks: dict[str, tuple[tuple, Ask]] | None = None) -> LRPStart:
    """The instance, its ask made by the one adapter (an LRPSpec is the wire's PlacementFields). `asks`
    (process guid -> its last placement fields and their ask) lets the instances of an app share one."""
    if asks is None:
        ask = ask_of(spec)
    else:
        fields = _placement_fields(spec)
        found = asks.get(spec.process_guid)
        if found is None or found[0] != fields:
            found = asks[spec.process_guid] = (fields, ask_of(spec))
        ask = found[1]
    return LRPStart(spec.process_guid, spec.index, ask, spec.total_instances, spec.previous_cell)


_placement_fields = operator.attrgetter(*PlacementFields.model_fields)


def task_to_engine(spec: TaskSpec) -> TaskStart:
    tags, drivers = tuple(spec.placement_tags), tuple(spec.volume_drivers)
    ask = Ask(spec.memory_mb, spec.disk_mb, spec.stack, tags, drivers)
    return TaskStart(spec.task_guid, ask)


def to_engine(workload: Workload) -> EngineInput:
    asks: dict[str, tuple[tuple, Ask]] = {}
    return EngineInput(
        cells=[cell_to_engine(c) for c in workload.cells],
        lrps=[lrp_to_engine(lrp, asks) for lrp in workload.lrps],
        tasks=[task_to_engine(t) for t in workload.tasks],
    )


def scheduler_config(workload: Workload, strategy: str, engine: str, seed: int) -> SchedulerConfig:
    knobs = workload.config
    return SchedulerConfig(
        strategy=strategy,
        engine=engine,
        seed=seed,
        starting_container_weight=knobs.starting_container_weight,
        bin_pack_first_fit_weight=knobs.bin_pack_first_fit_weight,
        max_inflight_starts=knobs.max_inflight_starts,
        now=workload.now,
    )


# --- checks the models cannot make (they need the engine's registry) -------------------------------


def available_strategies(engine: str = "fast") -> list[str]:
    """Strategies the registry offers, in the design's order, then any others by name."""
    offered = pickers(engine)
    return [s for s in STRATEGIES if s in offered] + sorted(s for s in offered if s not in STRATEGIES)


def check_strategy(name: str, field: str, engine: str = "fast") -> None:
    offered = available_strategies(engine)
    if name not in offered:
        raise WorkloadError(f"{field}: unknown strategy {name!r} (expected one of {', '.join(offered)})")


def check_workload(workload: Workload, strategy: str, engine: str) -> None:
    """Strategy names, objective and label expressions, each error naming its field."""
    from common.labels import validate_label_expression
    from common.objective import validate_objective

    if engine not in ("fast", "reference"):
        raise WorkloadError(f"--engine: unknown engine {engine!r} (expected fast or reference)")
    check_strategy(strategy, "--strategy", engine)
    for i, lrp in enumerate(workload.lrps):
        if lrp.strategy is not None:
            check_strategy(lrp.strategy, f"lrps[{i}].strategy", engine)
        expressions = [(f"lrps[{i}].objective", lrp.objective, validate_objective),
                       (f"lrps[{i}].labels_match", lrp.labels_match, validate_label_expression)]
        expressions += [(f"lrps[{i}].volumes[{j}].label_match", v.label_match, validate_label_expression)
                        for j, v in enumerate(lrp.volumes)]
        expressions += [(f"lrps[{i}].affinity[{j}].expression", a.expression, validate_label_expression)
                        for j, a in enumerate(lrp.affinity)]
        for field, text, validate in expressions:
            if not text:
                continue
            try:
                validate(text)
            except ValueError as exc:  # the expression is the user's error: say which and why
                message = " ".join(str(exc).split()) or type(exc).__name__
                raise WorkloadError(f"{field}: {message}") from None


# --- running and summarising -----------------------------------------------------------------------


def run_engine(inputs: EngineInput, config: SchedulerConfig) -> tuple[AuctionResult, float]:
    """Schedule once; the seconds returned cover scheduling only."""
    started = time.perf_counter()
    result = schedule(inputs.cells, inputs.lrps, inputs.tasks, config)
    return result, time.perf_counter() - started


def population_cv(values: list[float]) -> float:
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    if mean == 0:
        return 0.0
    variance = sum((v - mean) ** 2 for v in values) / len(values)
    return math.sqrt(variance) / mean


def summarise(
    workload: Workload,
    inputs: EngineInput,
    result: AuctionResult,
    seconds: float,
    strategy: str,
    engine: str,
    seed: int,
) -> dict:
    cells_by_id = {c.cell_id: c for c in inputs.cells}
    per_cell = {c.cell_id: len(c.lrps) for c in inputs.cells}
    allocated = {c.cell_id: c.total.memory_mb - c.available.memory_mb for c in inputs.cells}
    memory_of_lrp = {(lrp.process_guid, lrp.index): lrp.ask.memory_mb for lrp in inputs.lrps}
    memory_of_task = {t.task_guid: t.ask.memory_mb for t in inputs.tasks}
    for a in result.lrp_assignments:
        per_cell[a.cell_id] += 1
        allocated[a.cell_id] += memory_of_lrp[(a.process_guid, a.index)]
    for t in result.task_assignments:
        allocated[t.cell_id] += memory_of_task[t.task_guid]
    per_zone: dict[str, int] = {}
    for cell_id, n in per_cell.items():
        zone = cells_by_id[cell_id].zone
        per_zone[zone] = per_zone.get(zone, 0) + n

    placed = len(result.lrp_assignments) + len(result.task_assignments)
    failures: list[dict[str, Any]] = []
    for f in result.failures:
        if f.task_guid is not None:
            failures.append({"task_guid": f.task_guid, "error": f.error, "detail": f.detail})
        else:
            failures.append(
                {"process_guid": f.process_guid, "index": f.index, "error": f.error, "detail": f.detail}
            )
    return {
        "workload": workload.name,
        "strategy": strategy,
        "engine": engine,
        "seed": seed,
        "cells": len(inputs.cells),
        "placed": placed,
        "failed": len(result.failures),
        "lrps_placed": len(result.lrp_assignments),
        "tasks_placed": len(result.task_assignments),
        "seconds": round(seconds, 6),
        "placements_per_s": round(placed / seconds, 1) if seconds > 0 else 0.0,
        "per_cell_instances": per_cell,
        "per_zone_instances": dict(sorted(per_zone.items())),
        "cv_memory": round(population_cv([float(allocated[c.cell_id]) for c in inputs.cells]), 6),
        "assignments": [
            {"process_guid": a.process_guid, "index": a.index, "cell_id": a.cell_id}
            for a in result.lrp_assignments
        ],
        "task_assignments": [
            {"task_guid": t.task_guid, "cell_id": t.cell_id} for t in result.task_assignments
        ],
        "failures": failures,
        "failures_by_error": dict(Counter(f.error for f in result.failures).most_common()),
    }


def simulate(workload: Workload, strategy: str = "diego", engine: str = "fast", seed: int = 0) -> dict:
    """Check, convert, schedule and summarise; raises `WorkloadError` for what the models cannot check."""
    check_workload(workload, strategy, engine)
    inputs = to_engine(workload)
    result, seconds = run_engine(inputs, scheduler_config(workload, strategy, engine, seed))
    return summarise(workload, inputs, result, seconds, strategy, engine, seed)


def explain_item(workload: Workload, target: str, strategy: str = "diego", seed: int = 0) -> dict:
    """Why `target` (`PROCESS_GUID:INDEX` or a task guid) landed where it did, cell by cell."""
    from placement.explain import explain

    check_workload(workload, strategy, "reference")
    inputs = to_engine(workload)
    key: tuple[str, int] | str = target
    guid, sep, index = target.rpartition(":")
    if sep and index.isdigit():
        key = (guid, int(index))
    try:
        why = explain(inputs.cells, key, inputs.lrps, inputs.tasks,
                      scheduler_config(workload, strategy, "reference", seed))
    except KeyError:
        raise WorkloadError(f"--explain: {target!r} is not in the workload "
                            "(give PROCESS_GUID:INDEX or a task guid)") from None
    return why.as_dict()
