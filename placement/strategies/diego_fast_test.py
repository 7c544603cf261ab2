"""The fast Diego picker must agree with the exhaustive reference on every input."""


from placement.cell_offer import CellOffer, Resources
from placement.scheduler import schedule
from placement.testing import lrp_start
from placement.types import SchedulerConfig

APPS = [f"app{i}" for i in range(6)]


def test_a_full_cluster_fails_every_remaining_item_with_the_same_breakdown_as_the_reference():
    cells = [
        CellOffer(f"c{i}", f"z{i % 3}", Resources(100, 100, 100), Resources(100, 100, 100)) for i in range(9)
    ]
    lrps = [lrp_start(f"app{a}", i, 7, 3) for a in range(20) for i in range(10)]
    fast = schedule(cells, lrps, [], SchedulerConfig(engine="fast"))
    reference = schedule(cells, lrps, [], SchedulerConfig(engine="reference"))
    assert fast == reference
    assert len(fast.lrp_assignments) == 9 * 14  # 14 x 7 MB fit in 100 MB
    assert {f.error for f in fast.failures} == {"insufficient resources: memory"}
    assert fast.failures[-1].detail == "0/9 cells fit: 9 insufficient memory (largest free 2 MB, need 7)"
