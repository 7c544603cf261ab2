from __future__ import annotations

from typing import Any

from .invariants import Problem, bbs_duplicates, convergence_problem, real_duplicates, undesired_processes
from .observe import BBSView, RealProcess

CELLS = ("cell-0", "cell-1")


def actual(guid: str, index: int, cell: str, instance: str, state: str = "RUNNING",
           presence: str = "ORDINARY") -> dict[str, Any]:
    return {"process_guid": guid, "index": index, "cell_id": cell, "instance_guid": instance, "state": state,
            "presence": presence}


def view(desired: dict[str, int], actuals: list[dict[str, Any]], cells: tuple[str, ...] = CELLS) -> BBSView:
    return BBSView(desired, actuals, {}, frozenset(cells), "https://bbs")


def process(host: str, pid: int, guid: str, index: int, instance: str) -> RealProcess:
    return RealProcess(host, pid, guid, index, instance, cell_id=host)


def test_a_repaired_cluster_has_one_record_and_one_tree_per_desired_index() -> None:
    seen = view({"a": 2}, [actual("a", 0, "cell-0", "i0"), actual("a", 1, "cell-1", "i1")])
    # An instance that forked: two pids of one tree.
    processes = [process("cell-0", 10, "a", 0, "i0"), process("cell-0", 11, "a", 0, "i0"),
                 process("cell-1", 12, "a", 1, "i1"), RealProcess("cell-1", 13, task_guid="t")]
    assert convergence_problem(seen, processes, CELLS) is None
    assert bbs_duplicates(seen) == real_duplicates(processes) == undesired_processes(seen, processes) == {}


def test_a_suspect_beside_its_replacement_is_a_bbs_duplicate_and_not_repaired() -> None:
    seen = view(
        {"a": 1}, [actual("a", 0, "cell-0", "old", presence="SUSPECT"), actual("a", 0, "cell-1", "new")]
    )
    assert bbs_duplicates(seen) == {("a", 0): "RUNNING ORDINARY@cell-1(new), SUSPECT@cell-0(old)"}
    problem = convergence_problem(seen, [process("cell-1", 1, "a", 0, "new")], CELLS)
    assert (
        problem is not None
        and problem.key == ("a", 0)
        and str(problem).startswith("a[0]: expected one RUNNING ORDINARY record")
    )


def test_two_trees_for_one_index_are_a_real_duplicate_whatever_the_bbs_says() -> None:
    seen = view({"a": 1}, [actual("a", 0, "cell-1", "new")])
    processes = [process("cell-0", 1, "a", 0, "old"), process("cell-1", 2, "a", 0, "new")]
    assert real_duplicates(processes) == {("a", 0): "processes cell-0(old) pids [1], cell-1(new) pids [2]"}
    assert str(convergence_problem(seen, processes, CELLS)) == (
        "a[0]: the BBS names cell-1(new), the hosts run cell-0(old) pids [1], cell-1(new) pids [2]")


def test_processes_of_apps_or_indices_not_desired() -> None:
    seen = view({"a": 1}, [actual("a", 0, "cell-0", "i0")])
    processes = [process("cell-0", 1, "a", 0, "i0"), process("cell-1", 2, "a", 1, "i1"),
                 process("cell-1", 3, "gone", 0, "g0")]
    assert undesired_processes(seen, processes) == {
        ("a", 1): "index past its 1 instances: cell-1(i1) pids [2]",
        ("gone", 0): "not desired: cell-1(g0) pids [3]",
    }
    assert (
        str(convergence_problem(seen, processes, CELLS))
        == "a[1] runs but is not desired: cell-1(i1) pids [2]"
    )


def test_not_repaired_while_a_cell_is_missing_the_bbs_is_unreachable_or_an_index_is_not_running() -> None:
    assert convergence_problem(None, [], CELLS) == Problem("no BBS replica answers")
    assert convergence_problem(view({}, [], ("cell-0",)), [], CELLS) == Problem(
        "cells not present: ['cell-1']"
    )
    starting = view({"a": 1}, [actual("a", 0, "cell-0", "i0", state="CLAIMED")])
    assert convergence_problem(starting, [], CELLS) == Problem(
        "a[0]: expected one RUNNING ORDINARY record, the BBS shows ['CLAIMED/ORDINARY@cell-0']", ("a", 0))
    leftover = view({}, [actual("a", 0, "cell-0", "i0")])
    assert convergence_problem(leftover, [], CELLS) == Problem(
        "a[0] is not desired, the BBS shows ['RUNNING']", ("a", 0))
