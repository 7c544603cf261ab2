"""Diego's placement error strings, and the per-filter breakdown, through `schedule` on both engines."""

from __future__ import annotations

import pytest

from placement.strategies import pickers
from placement.testing import lrp_start, task_start

from .diego_cluster import ENGINES, diego_cell, run, unique_apps

engines = pytest.mark.parametrize("engine", ENGINES)


def only_failure(result):
    assert result.lrp_assignments == [] and result.task_assignments == []
    assert len(result.failures) == 1
    return result.failures[0]


@engines
@pytest.mark.parametrize("strategy", sorted(pickers("fast")))
def test_no_cell_with_the_rootfs(engine: str, strategy: str) -> None:
    failure = only_failure(run([diego_cell(0), diego_cell(1)], [lrp_start("win", 0, 1, 1, stack="windows")],
                               engine=engine, strategy=strategy))
    assert failure.error == "found no compatible cell for required rootfs"
    assert (failure.process_guid, failure.index) == ("win", 0)
    assert failure.detail == "0/2 cells fit: 2 stack mismatch"


@engines
@pytest.mark.parametrize("strategy", sorted(pickers("fast")))
def test_work_too_big_for_every_cell_names_every_shared_shortfall(engine: str, strategy: str) -> None:
    failure = only_failure(run([diego_cell(0), diego_cell(1)], [lrp_start("huge", 0, 200, 200)],
                               engine=engine, strategy=strategy))
    assert failure.error == "insufficient resources: disk, memory"


@engines
@pytest.mark.parametrize(
    ("tags", "error"),
    [
        (("a",), 'found no compatible cell with placement tag "a"'),
        (("a", "b", "c"), 'found no compatible cell with placement tags "a", "b" and "c"'),
    ],
)
def test_placement_tags_nobody_offers(engine: str, tags: tuple[str, ...], error: str) -> None:
    # cell-1 requires a tag the work does not carry; cell-0 offers no tags at all.
    cells = [diego_cell(0), diego_cell(1, placement_tags=frozenset({"z"}))]
    failure = only_failure(run(cells, [lrp_start("tagged", 0, 1, 1, placement_tags=tags)], engine=engine))
    assert failure.error == error


@engines
def test_every_cell_requires_a_tag_the_work_lacks(engine: str) -> None:
    cells = [diego_cell(i, placement_tags=frozenset({"isolated"})) for i in range(3)]
    failure = only_failure(run(cells, [lrp_start("plain", 0, 1, 1)], engine=engine))
    assert failure.error == "found no compatible cell with no placement tags"
    assert failure.detail == "0/3 cells fit: 3 placement tags mismatch"


@engines
def test_optional_tags_satisfy_a_request(engine: str) -> None:
    cells = [diego_cell(0), diego_cell(1, optional_placement_tags=frozenset({"ssd"}))]
    result = run(cells, [lrp_start("fast-disk", 0, 1, 1, placement_tags=("ssd",))], engine=engine)
    assert result.failures == []
    assert [a.cell_id for a in result.lrp_assignments] == ["cell-1"]


@engines
def test_missing_volume_drivers(engine: str) -> None:
    cells = [diego_cell(0, volume_drivers=frozenset({"nfs"})), diego_cell(1)]
    failure = only_failure(
        run(cells, [lrp_start("db", 0, 1, 1, volume_drivers=("nfs", "smb"))], engine=engine)
    )
    assert failure.error == "found no compatible cell with required volume drivers"


@engines
def test_furthest_compatibility_stage_wins(engine: str) -> None:
    # One cell lacks the rootfs, the other has it but not the tag: the tag is what stopped the work.
    cells = [diego_cell(0, stacks=("other",)), diego_cell(1)]
    failure = only_failure(run(cells, [lrp_start("t", 0, 1, 1, placement_tags=("gpu",))], engine=engine))
    assert failure.error == 'found no compatible cell with placement tag "gpu"'
    assert failure.detail == "0/2 cells fit: 1 stack mismatch, 1 placement tags mismatch"


@engines
def test_no_cells_at_all(engine: str) -> None:
    result = run([], [lrp_start("lonely", 0, 1, 1)], [task_start("job", 1, 1)], engine=engine)
    assert result.lrp_assignments == [] and result.task_assignments == []
    assert [f.error for f in result.failures] == ["unable to communicate to compatible cells"] * 2


@engines
def test_in_flight_start_limit(engine: str) -> None:
    cells = [diego_cell(0, starting_containers=1), diego_cell(1)]
    result = run(cells, unique_apps(4), engine=engine, max_inflight_starts=3)
    assert len(result.lrp_assignments) == 2  # one container was already starting
    assert [f.error for f in result.failures] == [
        "waiting to start instance: reached in-flight start limit"
    ] * 2


@engines
def test_breakdown_counts_each_cell_under_its_first_rejecting_filter(engine: str) -> None:
    cells = [
        diego_cell(0, stacks=("other",)),
        diego_cell(1, memory_mb=60),
        diego_cell(2, memory_mb=80),
        diego_cell(3, disk_mb=10),
    ]
    failure = only_failure(run(cells, [lrp_start("big", 0, 90, 20)], engine=engine))
    # Diego names only the problems every compatible cell shares; here none is shared.
    assert failure.error == "insufficient resources"
    assert failure.detail == (
        "0/4 cells fit: 1 stack mismatch, 2 insufficient memory (largest free 80 MB, need 90), "
        "1 insufficient disk (largest free 10 MB, need 20)"
    )


@engines
def test_shared_shortfall_is_named_even_when_cells_differ(engine: str) -> None:
    cells = [diego_cell(0, memory_mb=60), diego_cell(1, memory_mb=80, disk_mb=10)]
    failure = only_failure(run(cells, [lrp_start("big", 0, 90, 20)], engine=engine))
    assert failure.error == "insufficient resources: memory"


@engines
def test_task_failures_carry_the_task_guid(engine: str) -> None:
    result = run([diego_cell(0)], tasks=[task_start("migrate", 101, 1)], engine=engine)
    failure = only_failure(result)
    assert (failure.task_guid, failure.process_guid, failure.error) == (
        "migrate", None, "insufficient resources: memory",
    )
    assert failure.detail == "0/1 cells fit: 1 insufficient memory (largest free 100 MB, need 101)"
