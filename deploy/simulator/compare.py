"""Several strategies on one scenario, over one transport: the report behind `vendue simulate --scenario`.

The report is plain data (report.json, `--json`): what was placed, then one entry per strategy with the
numbers of metrics.summarise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from .metrics import Outcome, summarise
from .sim_input import SimInput

TRANSPORTS = ("inproc", "http", "nats")

OnProgress = Callable[[str, int, int], None]  # (strategy, settled, total)


def run_one(sim: SimInput, strategy: str, transport: str, engine: str, timeout: float,
            on_progress: OnProgress | None = None, cluster_plan: Any = None) -> Outcome:
    total = sim.instances + len(sim.tasks)
    if on_progress is not None:
        on_progress(strategy, 0, total)
    if transport == "inproc":
        from .transport_inproc import run_inproc

        outcome = run_inproc(sim, strategy, engine)
        if on_progress is not None:
            on_progress(strategy, total, total)
        return outcome
    from .transport_cluster import run_cluster

    progress = None if on_progress is None else (lambda done, all_: on_progress(strategy, done, all_))
    return run_cluster(sim, strategy, transport, engine=engine, timeout=timeout, progress=progress,
                       the_plan=cluster_plan)


def compare(sim: SimInput, strategies: Sequence[str], transport: str = "inproc", engine: str = "fast",
            seed: int = 0, timeout: float = 300.0, description: str = "",
            on_progress: OnProgress | None = None) -> dict[str, Any]:
    """Run every strategy (each on fresh cells) and gather the report."""
    if transport not in TRANSPORTS:
        raise ValueError(
            f"--transport: unknown transport {transport!r} (expected one of {', '.join(TRANSPORTS)})"
        )
    cluster_plan = None
    if transport != "inproc":  # refuse what the API cannot express before anything starts
        from .transport_cluster import plan

        cluster_plan = plan(sim)
    results = []
    for strategy in strategies:
        outcome = run_one(sim, strategy, transport, engine, timeout, on_progress, cluster_plan)
        results.append(summarise(sim, outcome))
    return {
        "scenario": sim.name,
        "description": description or sim.description,
        "transport": transport,
        "engine": engine,
        "seed": seed,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cells": len(sim.cells),
        "zones": sim.zones,
        "apps": len(sim.apps),
        "instances": sim.instances,
        "prefill_instances": sim.prefill_instances,
        "tasks": len(sim.tasks),
        "strategies": results,
    }
