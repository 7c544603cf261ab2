"""The in-process transport: the auctioneer's Auction against SimReps, requests counted as HTTP would."""

from __future__ import annotations

from collections import Counter

from .engine import simulate
from .scenarios import SCENARIOS
from .sim_input import SimInput, app, cell, to_workload
from .transport_inproc import SimRep, run_inproc
from .workload import parse_workload


def three_cells() -> SimInput:
    cells = [cell("a", "z0", 1000, 1000, 10, [("old", 0, 500, 10)]), cell("b", "z1", 1000, 1000, 10),
             cell("c", "z1", 300, 1000, 10)]
    return SimInput("three", cells, [app("web", 2, 200, 10), app("big", 1, 900, 10)])


def test_one_auction_counts_a_state_request_per_cell_and_a_work_request_per_winner() -> None:
    outcome = run_inproc(three_cells(), "diego")
    assert outcome.rounds == 1
    placed = {(g, i): cell_id for g, i, cell_id, _ in outcome.instances}
    assert placed[("old", 0)] == "a" and outcome.prefill_keys == {("old", 0)}
    assert placed[("big", 0)] == "b"  # only b has 900 MB free
    winners = {cell_id for key, cell_id in placed.items() if key != ("old", 0)}
    # The cell list, and the report of what each winner accepted.
    assert outcome.communications == {"bbs": 2, "rep_state": 3, "rep_work": len(winners)}
    assert outcome.failures == [] and len(outcome.waits) == 3
    assert all(0 <= w <= outcome.seconds for w in outcome.waits)


def test_failures_are_reported_once_per_auction_with_diego_s_error() -> None:
    sim = three_cells()
    sim.apps.append(app("huge", 1, 5000, 10))
    outcome = run_inproc(sim, "diego")
    assert outcome.communications["bbs"] == 2  # the cell list and one report (failures, what cells accepted)
    [failure] = outcome.failures
    assert (failure["process_guid"], failure["index"], failure["error"]) == (
        "huge",
        0,
        "insufficient resources: memory",
    )
    assert failure["detail"].startswith("0/3 cells fit")


class OverstatingRep(SimRep):
    """A rep whose bid claims 1 GB more memory than it has: the work it wins does not fit when it arrives."""

    def state(self):
        state = super().state()
        state.available.memory_mb += 1000
        return state


def test_refused_work_is_carried_into_the_next_round_until_it_runs_out_of_attempts() -> None:
    sim = SimInput("liar", [cell("a", "z0", 1000, 1000, 10)], [app("web", 1, 1500, 10)])
    outcome = run_inproc(sim, "diego", max_attempts=3, rep_class=OverstatingRep)
    assert outcome.rounds == 3
    assert outcome.communications == {"bbs": 6, "rep_state": 3, "rep_work": 3}  # 3 lists + 3 auction reports
    [failure] = outcome.failures
    # The rep's own words for what no longer fits (rep/admission.py), as a real rep would answer.
    assert failure["error"] == "insufficient resources: memory"
    assert failure["detail"] == "cell a: insufficient resources: memory (after 3 attempts)"


def test_inproc_places_like_the_engine_on_the_same_workload() -> None:
    sim = SCENARIOS["cold-start-small"].build(0)
    outcome = run_inproc(sim, "diego")
    engine_only = simulate(parse_workload(to_workload(sim)), strategy="diego")
    per_cell = Counter(cell_id for _, _, cell_id, _ in outcome.instances)
    assert {c: n for c, n in engine_only["per_cell_instances"].items() if n} == dict(per_cell)
    assert len(outcome.waits) == engine_only["placed"] == 1000


def test_tasks_and_prefill_tasks_hold_memory() -> None:
    data = {
        "name": "tasks",
        "cells": [{"id": "a", "zone": "z0", "memory_mb": 1000, "disk_mb": 1000, "containers": 3,
                   "prefill_tasks": [{"task_guid": "old", "memory_mb": 600, "disk_mb": 1}]}],
        "lrps": [{"process_guid": "web", "index": 0, "memory_mb": 300, "disk_mb": 1}],
        "tasks": [{"task_guid": "job", "memory_mb": 300, "disk_mb": 1}],
    }
    from .sim_input import from_workload

    outcome = run_inproc(from_workload(parse_workload(data)), "diego")
    # 400 MB were left after the running task: Diego's order places index-0 LRPs before tasks.
    assert [(g, c) for g, _, c, _ in outcome.instances] == [("web", "a")] and len(outcome.waits) == 1
    assert outcome.tasks == []
    assert [(f["task_guid"], f["error"]) for f in outcome.failures] == [
        ("job", "insufficient resources: memory")
    ]
