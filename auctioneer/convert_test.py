import dataclasses

from auctioneer.batcher import PendingLRP, PendingTask
from auctioneer.convert import cell_from_state, lrp_starts, placement_failures, task_starts
from common.models import CellState
from placement.ask import AffinityRule, Ask, DeviceRequest, VolumeRequest
from placement.cell_offer import CellOffer, HostMetrics, Resources, RunningInstance, Volume
from placement.slot import CellSlot
from placement.types import Failure
from placement.work import LRPStart, TaskStart
from tests.auctioneer.fakes import desired, task


def test_cell_state_becomes_an_engine_cell_with_every_field_that_matters():
    state = CellState.model_validate_json("""{
        "cell_id": "cell-1", "zone": "z2",
        "stacks": ["cflinuxfs4", "windows"],
        "total": {"memory_mb": 8192, "disk_mb": 32768, "containers": 250},
        "available": {"memory_mb": 6144, "disk_mb": 30000, "containers": 247},
        "starting_containers": 2, "placement_tags": ["gpu"], "optional_placement_tags": ["ssd"],
        "volume_drivers": ["nfs"], "labels": {"rack": "r1"}, "evacuating": false,
        "lrp_counts": {"web": 2}, "stopping_counts": {"old": 1},
        "tasks": [{"task_guid": "t1", "memory_mb": 128, "disk_mb": 64}],
        "offers": {
            "host": {"swap_used_mb": 1, "swap_total_mb": 2, "mem_used_mb": 3, "mem_total_mb": 4,
                     "disk_used_mb": 5, "disk_total_mb": 6, "load5": 0.5, "cores": 4},
            "volumes": [{"name": "v1", "size_mb": 100, "labels": {"tier": "fast"}, "ephemeral": true,
                         "holder": "web/0"}],
            "ingress_ips": ["10.0.0.1"], "devices": {"gpu": 2}, "cached_blobs": ["blob-a"]
        },
        "a_field_from_a_newer_rep": 1
    }""")

    cell = cell_from_state(state)

    assert cell == CellOffer(
        cell_id="cell-1",
        zone="z2",
        total=Resources(8192, 32768, 250),
        available=Resources(6144, 30000, 247),
        stacks=("cflinuxfs4", "windows"),
        placement_tags=frozenset({"gpu"}),
        optional_placement_tags=frozenset({"ssd"}),
        volume_drivers=frozenset({"nfs"}),
        labels={"rack": "r1"},
        starting_containers=2,
        lrp_counts={"web": 2},
        stopping_counts={"old": 1},
        tasks=["t1"],
        host=HostMetrics(1, 2, 3, 4, 5, 6, 0.5, 4),
        volumes=[Volume("v1", 100, {"tier": "fast"}, True, "web/0")],
        ingress_ips=["10.0.0.1"],
        devices={"gpu": 2},
        cached_blobs=frozenset({"blob-a"}),
    )


def test_a_minimal_cell_state_uses_the_engine_defaults():
    state = CellState.model_validate_json(
        '{"cell_id": "c", "zone": "z",'
        ' "total": {"memory_mb": 1, "disk_mb": 2, "containers": 3},'
        ' "available": {"memory_mb": 1, "disk_mb": 2, "containers": 3}}'
    )
    cell = cell_from_state(state)
    assert cell.host is None and cell.lrps == [] and cell.tasks == [] and cell.stacks == ("cflinuxfs4",)
    assert (cell.volumes, cell.ingress_ips, cell.devices, cell.cached_blobs) == ([], [], {}, frozenset())


def test_a_bid_counts_for_spreading_like_the_instances_it_stands_for():
    summary = cell_from_state(CellState.model_validate_json(
        '{"cell_id": "c", "zone": "z",'
        ' "total": {"memory_mb": 9, "disk_mb": 9, "containers": 9},'
        ' "available": {"memory_mb": 5, "disk_mb": 5, "containers": 5},'
        ' "lrp_counts": {"web": 2}, "stopping_counts": {"api": 1}}'))
    instances = dataclasses.replace(summary, lrp_counts={}, stopping_counts={}, lrps=[
        RunningInstance("web", 0, 1, 1), RunningInstance("web", 1, 1, 1),
        RunningInstance("api", 0, 1, 1, delayed_shutdown=True)])

    def held(cell):  # what the engine counts for spreading: instances per process, and those stopping
        slot = CellSlot(0, 0, cell)
        return slot.proc_counts, slot.delayed_counts

    assert held(summary) == held(instances) == ({"web": 2}, {"api": 1})
    assert summary.lrps == []  # the counts are carried as they are, not expanded into instances


def test_one_lrp_start_per_index_with_the_desired_lrps_placement_fields():
    d = desired(
        "web",
        instances=5,
        memory_mb=512,
        disk_mb=2048,
        stack="windows",
        placement_tags=["gpu"],
        volume_drivers=["nfs"],
        domain="apps",
        strategy="service",
        objective="diego-blog",
        source_blob="blob-a",
        labels_match="rack == r1",
        volumes=[{"name": "v", "size_mb": 10, "label_match": "x", "ephemeral": True}],
        ingress_ip=True,
        devices=[{"kind": "gpu", "count": 2}],
        affinity=[{"expression": "a", "weight": -2}],
    )
    starts = lrp_starts([PendingLRP(d, 1), PendingLRP(d, 4)])
    ask = Ask(
        memory_mb=512, disk_mb=2048, stack="windows", placement_tags=("gpu",), volume_drivers=("nfs",),
        strategy="service", objective="diego-blog", source_blob="blob-a", labels_match="rack == r1",
        volumes=(VolumeRequest("v", 10, "x", True),), ingress_ip=True, devices=(DeviceRequest("gpu", 2),),
        affinity=(AffinityRule("a", -2),),
    )
    assert starts == [LRPStart("web", 1, ask, 5), LRPStart("web", 4, ask, 5)]
    assert starts[0].ask is starts[1].ask  # one ask per desired LRP, shared by its instances


def test_tasks_become_task_starts():
    t = task("t9", memory_mb=64, disk_mb=128, stack="windows", placement_tags=["a"], volume_drivers=["nfs"],
             domain="jobs")
    assert task_starts([PendingTask(t)]) == [TaskStart("t9", Ask(64, 128, "windows", ("a",), ("nfs",)))]


def test_engine_failures_become_the_bbs_report():
    body = placement_failures([
        Failure("insufficient resources: memory", "0/3 cells fit", process_guid="web", index=2),
        Failure("found no compatible cell for required rootfs", "3 stack mismatch", task_guid="t1"),
    ])
    assert body.model_dump() == {
        "lrps": [{"process_guid": "web", "index": 2, "error": "insufficient resources: memory",
                  "detail": "0/3 cells fit"}],
        "tasks": [{"task_guid": "t1", "error": "found no compatible cell for required rootfs",
                   "detail": "3 stack mismatch"}],
        "accepted": {},
        "fencing_token": 0,  # the reporter stamps the auction's term (reporter.py)
    }
