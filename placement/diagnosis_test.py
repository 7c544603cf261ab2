from placement.cell_offer import CellOffer, Resources
from placement.diagnosis import diagnose
from placement.state import AuctionState
from placement.testing import lrp_start, task_start
from placement.types import SchedulerConfig


def cell(i: int, memory=100, disk=100, containers=10, **kw) -> CellOffer:
    return CellOffer(f"c{i}", "z0", Resources(100, 100, 10), Resources(memory, disk, containers), **kw)


def test_furthest_compatibility_stage_names_the_error():
    state = AuctionState(
        [cell(0, stacks=("other",)), cell(1, placement_tags=frozenset({"gpu"}))], SchedulerConfig()
    )
    failure = diagnose(state, lrp_start("a", 0, 1, 1))
    assert failure.error == "found no compatible cell with no placement tags"
    assert failure.detail == "0/2 cells fit: 1 stack mismatch, 1 placement tags mismatch"
    assert (failure.process_guid, failure.index) == ("a", 0)


def test_insufficient_resources_names_what_every_compatible_cell_lacks_sorted():
    cells = [cell(0, memory=5, disk=5), cell(1, memory=5, disk=50, containers=0), cell(2, stacks=("x",))]
    failure = diagnose(AuctionState(cells, SchedulerConfig()), task_start("t", 10, 10))
    assert failure.error == "insufficient resources: memory"  # c1 has disk, so disk is not common
    assert failure.task_guid == "t"
    assert failure.detail == ("0/3 cells fit: 1 stack mismatch, "
                              "2 insufficient memory (largest free 5 MB, need 10)")
    both = diagnose(AuctionState([cell(0, memory=5, disk=5)], SchedulerConfig()), task_start("t", 10, 10))
    assert both.error == "insufficient resources: disk, memory"


def test_no_cells_means_no_communication():
    failure = diagnose(AuctionState([], SchedulerConfig()), lrp_start("a", 0, 1, 1))
    assert failure.error == "unable to communicate to compatible cells"


def test_image_work_without_a_docker_cell_is_diegos_rootfs_error_in_both_forms():
    from common.models.image import IMAGE_STACK

    # A cell whose executor runs images advertises the docker stack beside its own (common/models/image.py).
    plain = [cell(0), cell(1, stacks=("cflinuxfs4",))]
    for item in (lrp_start("web", 0, 1, 1, stack=IMAGE_STACK), task_start("t", 1, 1, stack=IMAGE_STACK)):
        scalar = diagnose(AuctionState(plain, SchedulerConfig()), item)
        vectorised = diagnose(AuctionState(plain, SchedulerConfig()), item, vectorised=True)
        assert (scalar.error, scalar.detail) == (vectorised.error, vectorised.detail) == (
            "found no compatible cell for required rootfs", "0/2 cells fit: 2 stack mismatch")
    docker = cell(2, stacks=("cflinuxfs4", IMAGE_STACK), memory=0)  # compatible, but full
    state = AuctionState([*plain, docker], SchedulerConfig())
    failure = diagnose(state, lrp_start("web", 0, 1, 1, stack=IMAGE_STACK), vectorised=True)
    assert failure.error == "insufficient resources: memory"
