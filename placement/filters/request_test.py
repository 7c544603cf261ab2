"""The request filters (labels, volumes, ingress IP, devices): each filter's rules and messages, and that
they hold, and are claimed, whichever strategy places."""

import pytest

from placement.testing import lrp_start
from tests.support.engine_workloads import make_cell, placements

from ..ask import DeviceRequest, VolumeRequest
from ..cell_offer import Volume
from ..scheduler import schedule
from ..state import AuctionState
from ..types import SchedulerConfig
from .devices import DEVICES
from .ingress import INGRESS_IP
from .labels import LABELS
from .volumes import VOLUMES, match_volume, volume_plan

STRATEGIES = ("diego", "dea", "loadmark", "service", "binpack", "random")


def slots_of(*cells):
    return AuctionState(list(cells), SchedulerConfig()).slots


def lrp(index=0, guid="db", **fields):
    return lrp_start(guid, index, 256, 256, **fields)


def test_labels_filter_and_messages():
    gpu, plain = slots_of(make_cell("gpu", labels={"gpu": "true"}), make_cell("plain"))
    item = lrp(labels_match="gpu=true")
    assert not LABELS.rejects(gpu, item)
    assert LABELS.rejects(plain, item)
    assert LABELS.error(item) == 'found no compatible cell with labels matching "gpu=true"'
    assert LABELS.summary([plain, plain, plain], item) == "3 labels mismatch"


def test_match_volume_size_labels_and_holder():
    request = VolumeRequest("data", 1024, "tier=db")
    assert match_volume(Volume("v", 1024, {"tier": "db"}), request)
    assert not match_volume(Volume("v", 512, {"tier": "db"}), request)
    assert not match_volume(Volume("v", 4096, {"tier": "web"}), request)
    assert not match_volume(Volume("v", 4096, {"tier": "db"}, holder="other/0"), request)
    assert match_volume(Volume("v", 1, {}), VolumeRequest("any"))


def test_volume_plan_gives_each_request_its_own_volume():
    volumes = [Volume("v0", 100), Volume("v1", 2000)]
    assert volume_plan(volumes, [VolumeRequest("a", 50), VolumeRequest("b", 50)], "x/0") == [0, 1]
    assert volume_plan(volumes, [VolumeRequest("a", 1000), VolumeRequest("b", 1000)], "x/0") is None
    assert volume_plan(volumes, [], "x/0") == []


def test_volume_plan_prefers_the_instances_own_volume_over_a_free_one():
    volumes = [Volume("free", 5000), Volume("mine", 10, ephemeral=True, holder="db/0")]
    # the own volume satisfies the request whatever its size or labels: that is the stickiness
    assert volume_plan(volumes, [VolumeRequest("data", 1000, "tier=db")], "db/0") == [1]
    assert volume_plan(volumes, [VolumeRequest("data", 1000, "tier=db")], "db/1") is None


def test_volumes_filter_and_messages():
    mine, theirs, free = slots_of(
        make_cell("mine", volumes=[Volume("v", 10, holder="db/0", ephemeral=True)]),
        make_cell("theirs", volumes=[Volume("v", 10_000, holder="db/1", ephemeral=True)]),
        make_cell("free", volumes=[Volume("v", 10_000)]),
    )
    item = lrp(volumes=(VolumeRequest("data", 1000, ephemeral=True),))
    assert not VOLUMES.rejects(mine, item)
    assert VOLUMES.rejects(theirs, item)
    assert not VOLUMES.rejects(free, item)
    assert VOLUMES.error(item) == "found no compatible cell with required volumes"
    assert VOLUMES.summary([theirs, theirs], item) == "2 missing volumes"


def test_ingress_and_devices_filters_and_messages():
    rich, poor = slots_of(
        make_cell("rich", ingress_ips=["10.0.0.1"], devices={"gpu": 2}),
        make_cell("poor", devices={"gpu": 1, "fpga": 4}),
    )
    item = lrp(ingress_ip=True, devices=(DeviceRequest("gpu", 1), DeviceRequest("gpu", 1)))
    assert not INGRESS_IP.rejects(rich, item)
    assert INGRESS_IP.rejects(poor, item)
    assert not DEVICES.rejects(rich, item)
    assert DEVICES.rejects(poor, item)  # two gpu requests add up to 2
    assert INGRESS_IP.error(item) == "found no compatible cell with a free ingress IP"
    assert DEVICES.error(item) == "found no compatible cell with required devices"
    assert INGRESS_IP.summary([poor] * 4, item) == "4 no free ingress IP"
    assert DEVICES.summary([poor], item) == "1 missing devices"
    assert all(f.resource is False for f in (LABELS, VOLUMES, INGRESS_IP, DEVICES))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("engine", ("fast", "reference"))
def test_devices_are_consumed_as_the_batch_fills(strategy, engine):
    cells = [make_cell("a", devices={"gpu": 2}), make_cell("b", devices={"gpu": 1}), make_cell("c")]
    lrps = [lrp(i, devices=(DeviceRequest("gpu"),)) for i in range(4)]
    result = schedule(cells, lrps, config=SchedulerConfig(strategy=strategy, engine=engine))
    assert sorted(placements(result).values()) == ["a", "a", "b"]
    [failure] = result.failures
    assert failure.error == "found no compatible cell with required devices"
    assert failure.detail == "0/3 cells fit: 3 missing devices"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("engine", ("fast", "reference"))
def test_request_filters_hold_under_every_strategy(strategy, engine):
    cells = [
        make_cell("plain"),
        make_cell("labelled", labels={"disk": "ssd"}, ingress_ips=["10.0.0.1"]),
        make_cell("volume", labels={"disk": "ssd"}, volumes=[Volume("v", 4096, {"class": "fast"})]),
    ]
    lrps = [
        lrp(0, "web", labels_match="disk=ssd", ingress_ip=True),
        lrp(1, "web", labels_match="disk=ssd", ingress_ip=True),  # the only IP is taken by index 0
        lrp(0, "db", volumes=(VolumeRequest("data", 1024, "class=fast"),)),
        lrp(1, "db", volumes=(VolumeRequest("data", 1024, "class=fast"),)),  # the only volume is taken
    ]
    result = schedule(cells, lrps, config=SchedulerConfig(strategy=strategy, engine=engine))
    assert placements(result) == {"web/0": "labelled", "db/0": "volume"}
    errors = {(f.process_guid, f.index): (f.error, f.detail) for f in result.failures}
    assert errors == {
        ("web", 1): ("found no compatible cell with a free ingress IP",
                     "0/3 cells fit: 1 labels mismatch, 2 no free ingress IP"),
        ("db", 1): ("found no compatible cell with required volumes", "0/3 cells fit: 3 missing volumes"),
    }


def test_the_state_claims_the_volume_the_plan_chose():
    cells = [make_cell("a", volumes=[Volume("big", 8000), Volume("small", 600)])]
    lrps = [lrp(0, volumes=(VolumeRequest("data", 500, ephemeral=True),))]
    state = AuctionState(cells, SchedulerConfig())
    state.reserve_lrp(state.slots[0], lrps[0])
    assert [(v.name, v.holder, v.ephemeral) for v in state.slots[0].volumes] == [
        ("big", "db/0", True), ("small", None, False),
    ]
