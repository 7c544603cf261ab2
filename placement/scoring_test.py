import pytest

from placement.cell_offer import CellOffer, Resources, RunningInstance
from placement.scoring import lrp_score, lrp_score_components, task_score
from placement.slot import CellSlot


def slot(avail=(50, 100, 8), starting=0, lrps=(), tasks=(), zone_pos=0) -> CellSlot:
    cell = CellOffer("c", "z", Resources(100, 200, 10), Resources(*avail), starting_containers=starting,
                lrps=list(lrps), tasks=list(tasks))
    return CellSlot(0, zone_pos, cell)


def test_mean_used_fraction_after_placing_plus_starting_weight():
    # after placing 10 MB / 20 MB / 1 container: memory 60 %, disk 60 %, containers 30 % used
    assert lrp_score(slot(starting=2), 10, 20, "app", 0.25, 0.0) == pytest.approx(0.5 + 0.5)


def test_same_process_instances_add_a_thousand_each_and_bin_pack_adds_by_index():
    held = slot(lrps=[RunningInstance("app", 0), RunningInstance("app", 1), RunningInstance("other", 0)])
    base = lrp_score(slot(), 10, 20, "app", 0.25, 0.0)
    assert lrp_score(held, 10, 20, "app", 0.25, 0.0) == pytest.approx(base + 2000)
    assert lrp_score(slot(zone_pos=3), 10, 20, "app", 0.25, 0.5) == pytest.approx(base + 1.5)


def test_tasks_count_tasks_on_the_cell():
    assert task_score(slot(tasks=["a", "b"]), 10, 20, 0.25) == pytest.approx(
        task_score(slot(), 10, 20, 0.25) + 2000
    )


def test_components_add_up_to_the_score():
    parts = lrp_score_components(slot(starting=1, zone_pos=2), 10, 20, "app", 0.25, 0.1)
    total = (parts["memory_used"] + parts["disk_used"] + parts["containers_used"]) / 3 + parts["starting"] \
        + parts["same_process"] + parts["bin_pack"]
    assert parts["score"] == pytest.approx(total)
