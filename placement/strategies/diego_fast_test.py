"""The fast Diego picker must agree with the exhaustive reference on every input."""

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.cell_offer import CellOffer, Resources, RunningInstance
from placement.scheduler import schedule
from placement.testing import lrp_start, task_start
from placement.types import SchedulerConfig

APPS = [f"app{i}" for i in range(6)]


@st.composite
def workloads(draw):
    zones = draw(st.sampled_from([["z0"], ["z0", "z1"], ["z0", "z1", "z2"]]))
    uniform = draw(st.booleans())  # identical cells: the tie-breaking path
    cells = []
    for i in range(draw(st.integers(1, 10))):
        tm, td, tc = (
            (40, 40, 6)
            if uniform
            else (
                draw(st.sampled_from([20, 40, 80])),
                draw(st.sampled_from([30, 60])),
                draw(st.integers(1, 8)),
            )
        )
        prefill, am, ad, ac = [], tm, td, tc
        for k in range(draw(st.integers(0, 3))):
            m, d = draw(st.integers(1, 12)), draw(st.integers(1, 12))
            if am >= m and ad >= d and ac >= 1:
                prefill.append(RunningInstance(draw(st.sampled_from(APPS)), k, m, d))
                am, ad, ac = am - m, ad - d, ac - 1
        cells.append(CellOffer(
            f"c{i}", zones[i % len(zones)] if uniform else draw(st.sampled_from(zones)),
            Resources(tm, td, tc), Resources(am, ad, ac), lrps=prefill,
            stacks=draw(st.sampled_from([("cflinuxfs4",), ("cflinuxfs4", "windows")])),
            placement_tags=frozenset(draw(st.sampled_from([(), ("gpu",)]))),
            optional_placement_tags=frozenset(draw(st.sampled_from([(), ("ssd",)]))),
            starting_containers=draw(st.integers(0, 3)),
            tasks=[f"old{j}" for j in range(draw(st.integers(0, 2)))],
        ))
    lrps = [
        lrp_start(
            draw(st.sampled_from(APPS)),
            draw(st.integers(0, 12)),
            draw(st.sampled_from([1, 2, 5, 9, 17])),
            draw(st.sampled_from([1, 3, 11])),
            stack=draw(st.sampled_from(["cflinuxfs4", "cflinuxfs4", "windows"])),
            placement_tags=draw(st.sampled_from([(), (), ("gpu",), ("ssd",)])),
        )
        for _ in range(draw(st.integers(0, 40)))
    ]
    tasks = [task_start(f"t{j}", draw(st.sampled_from([1, 4, 13])), draw(st.sampled_from([1, 6])))
             for j in range(draw(st.integers(0, 8)))]
    config = dict(
        starting_container_weight=draw(st.sampled_from([0.25, 0.0, 2.0])),
        bin_pack_first_fit_weight=draw(st.sampled_from([0.0, 0.0, 0.3])),
        max_inflight_starts=draw(st.sampled_from([0, 0, 15])),
    )
    return cells, lrps, tasks, config


@settings(max_examples=150, deadline=None)
@given(workloads())
def test_fast_equals_reference(workload):
    cells, lrps, tasks, config = workload
    fast = schedule(cells, lrps, tasks, SchedulerConfig(engine="fast", **config))
    reference = schedule(cells, lrps, tasks, SchedulerConfig(engine="reference", **config))
    assert fast == reference


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
