"""Cross-engine property: for every strategy the registry offers, the fast and the reference engine give
identical assignments and failures (error and breakdown) for the same input and seed.

Workloads are small (≤ 12 cells, ≤ 60 items) but dense in what makes engines diverge: several zones,
prefill of apps the batch also starts, required and optional placement tags, a second rootfs, tasks,
tight capacity, in-flight limits, labels, host metrics, stale advertisements and per-LRP strategies.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import schedule
from placement.cell_offer import CellOffer, HostMetrics, Resources, RunningInstance
from placement.strategies import pickers
from placement.testing import lrp_start, task_start
from placement.types import SchedulerConfig
from placement.work import LRPStart, TaskStart

STRATEGY_NAMES = sorted(pickers("fast"))
NOW = 1_000.0


@st.composite
def cells(draw) -> list[CellOffer]:
    zones = draw(st.integers(1, 3))
    count = draw(st.integers(1, 12))
    out = []
    for i in range(count):
        memory = draw(st.integers(4, 48))
        disk = draw(st.integers(4, 48))
        containers = draw(st.integers(1, 8))
        prefill = []
        free_m, free_d, free_c = memory, disk, containers
        for _ in range(draw(st.integers(0, 4))):
            m, d = draw(st.integers(0, 8)), draw(st.integers(0, 8))
            if m > free_m or d > free_d or free_c < 1:
                break
            # Prefill apps share guids with the batch ("app-N") so same-process counts matter.
            guid = draw(st.sampled_from(["app-0", "app-1", "app-2", "old-0", "old-1"]))
            prefill.append(RunningInstance(guid, len(prefill) + 10 * i, m, d))
            free_m, free_d, free_c = free_m - m, free_d - d, free_c - 1
        host = None
        if draw(st.booleans()):
            host = HostMetrics(
                swap_used_mb=draw(st.floats(0, 100)), swap_total_mb=100.0,
                mem_used_mb=draw(st.floats(0, memory)), disk_used_mb=draw(st.floats(0, disk)),
                load5=draw(st.floats(0, 8)), cores=draw(st.integers(1, 4)),
            )
        expires_at = draw(st.sampled_from([None, NOW - 1, NOW + 1]))
        out.append(
            CellOffer(
                cell_id=f"cell-{i}",
                zone=f"z{draw(st.integers(0, zones - 1))}",
                total=Resources(memory, disk, containers),
                available=Resources(free_m, free_d, free_c),
                stacks=draw(
                    st.sampled_from([("cflinuxfs4",), ("cflinuxfs4",), ("cflinuxfs4", "other"), ("other",)])
                ),
                placement_tags=frozenset(draw(st.sampled_from([(), (), (), ("iso",)]))),
                optional_placement_tags=frozenset(draw(st.sampled_from([(), ("ssd",), ("ssd", "gpu")]))),
                labels=draw(st.sampled_from([{}, {"tier": "web"}, {"tier": "db"}])),
                starting_containers=draw(st.integers(0, 2)),
                lrps=prefill,
                host=host,
                advertised_at=None if expires_at is None else NOW - 5,
                expires_at=expires_at,
            )
        )
    return out


@st.composite
def batches(draw) -> tuple[list[LRPStart], list[TaskStart]]:
    lrps: list[LRPStart] = []
    for app in range(draw(st.integers(0, 8))):
        memory = draw(st.integers(1, 16))
        disk = draw(st.integers(1, 16))
        stack = draw(st.sampled_from(["cflinuxfs4"] * 5 + ["other", "missing"]))
        tags = draw(st.sampled_from([(), (), (), ("ssd",), ("iso",), ("gpu", "ssd"), ("nowhere",)]))
        labels_match = draw(st.sampled_from(["", "", "", "tier=web", "tier!=db"]))
        strategy = draw(st.sampled_from([None, None, None, *STRATEGY_NAMES]))
        count = draw(st.integers(1, 6))
        indices = sorted(draw(st.sets(st.integers(0, 7), min_size=1, max_size=count)))
        lrps += [
            lrp_start(f"app-{app}", index, memory, disk, stack=stack, placement_tags=tags,
                     labels_match=labels_match, strategy=strategy, total_instances=count)
            for index in indices
        ]
    tasks = [
        task_start(f"task-{t}", draw(st.integers(1, 16)), draw(st.integers(1, 16)),
                  placement_tags=draw(st.sampled_from([(), (), ("ssd",)])))
        for t in range(draw(st.integers(0, 6)))
    ]
    return lrps, tasks


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=cells(),
    batch=batches(),
    seed=st.integers(0, 2**16),
    inflight=st.sampled_from([0, 0, 0, 3, 10]),
    bin_pack=st.sampled_from([0.0, 0.0, 0.5]),
)
def test_fast_and_reference_agree_for_every_strategy(cluster, batch, seed, inflight, bin_pack) -> None:
    lrps, tasks = batch
    for strategy in STRATEGY_NAMES:
        results = {}
        for engine in ("fast", "reference"):
            config = SchedulerConfig(
                strategy=strategy,
                engine=engine,
                seed=seed,
                max_inflight_starts=inflight,
                bin_pack_first_fit_weight=bin_pack,
                now=NOW,
            )
            results[engine] = schedule(cluster, lrps, tasks, config)
        fast, reference = results["fast"], results["reference"]
        assert fast.lrp_assignments == reference.lrp_assignments, strategy
        assert fast.task_assignments == reference.task_assignments, strategy
        assert fast.failures == reference.failures, strategy
        # Every piece of (deduplicated) work is either placed or failed, exactly once.
        keys = {lrp.key for lrp in lrps}
        placed = [(a.process_guid, a.index) for a in fast.lrp_assignments]
        failed = [(f.process_guid, f.index) for f in fast.failures if f.task_guid is None]
        assert sorted(placed + failed) == sorted(keys), strategy
        task_outcomes = [t.task_guid for t in fast.task_assignments] + [
            f.task_guid for f in fast.failures if f.task_guid is not None
        ]
        assert sorted(task_outcomes) == sorted(t.task_guid for t in tasks), strategy


@settings(max_examples=30, deadline=None)
@given(cluster=cells(), batch=batches(), seed=st.integers(0, 2**16))
def test_same_seed_same_answer(cluster, batch, seed) -> None:
    lrps, tasks = batch
    for strategy in STRATEGY_NAMES:
        config = SchedulerConfig(strategy=strategy, engine="fast", seed=seed, now=NOW)
        assert schedule(cluster, lrps, tasks, config) == schedule(cluster, lrps, tasks, config), strategy
