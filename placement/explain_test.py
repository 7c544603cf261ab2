from placement.cell_offer import CellOffer, Resources
from placement.explain import explain
from placement.scheduler import schedule
from placement.testing import lrp_start, task_start
from placement.types import SchedulerConfig


def cell(cell_id: str, zone: str, memory: int = 100, stacks=("cflinuxfs4",)) -> CellOffer:
    return CellOffer(cell_id, zone, Resources(memory, 100, 100), Resources(memory, 100, 100), stacks=stacks)


def test_explains_the_chosen_cell_with_score_components_matching_the_engine():
    cells = [cell("a", "z0"), cell("b", "z1"), cell("c", "z1", memory=50)]
    lrps = [lrp_start("web", i, 10, 10) for i in range(3)]
    placed = {(a.process_guid, a.index): a.cell_id for a in schedule(cells, lrps).lrp_assignments}

    why = explain(cells, ("web", 2), lrps)

    assert why.chosen == placed[("web", 2)]
    scored = {v.cell_id: v.components for v in why.cells}
    # web/0 and web/1 went to different zones; the third instance meets one instance in each zone, so
    # the lowest score over all cells wins, and it must be the one the engine picked.
    lowest = min(scored, key=lambda c: (scored[c]["score"], c))
    assert lowest == why.chosen
    parts = scored[why.chosen]
    assert parts["score"] == (parts["memory_used"] + parts["disk_used"] + parts["containers_used"]) / 3.0 \
        + parts["starting"] + parts["same_process"] + parts["bin_pack"]


def test_explains_a_miss_with_each_cells_rejecting_filter():
    cells = [cell("a", "z0", stacks=("other",)), cell("b", "z1", memory=50)]
    why = explain(cells, ("big", 0), [lrp_start("big", 0, 80, 10)])
    assert why.chosen is None
    assert why.error == "insufficient resources: memory"
    assert (
        why.detail == "0/2 cells fit: 1 stack mismatch, 1 insufficient memory (largest free 50 MB, need 80)"
    )
    verdicts = {v.cell_id: (v.rejected_by, v.reason) for v in why.cells}
    assert verdicts == {"a": ("stack", "stack mismatch"),
                        "b": ("memory", "insufficient memory (largest free 50 MB, need 80)")}


def test_explains_a_task_against_the_state_earlier_items_left():
    cells = [cell("a", "z0"), cell("b", "z0")]
    tasks = [task_start("first", 60, 1), task_start("second", 50, 1)]
    why = explain(cells, "second", tasks=tasks, config=SchedulerConfig())
    first_cell = schedule(cells, tasks=tasks[:1]).task_assignments[0].cell_id
    verdicts = {v.cell_id: v for v in why.cells}
    assert verdicts[first_cell].rejected_by == "memory"
    assert why.chosen != first_cell
