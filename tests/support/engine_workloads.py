"""Hypothesis generators of small, tight workloads, for the fast == reference engine tests.

Test support only (imported by the engine's `*_test.py` files). The workloads are small so each
example is cheap, and tight so that capacity, tags, labels, devices and volumes really decide: few
cells, few container slots, prefilled instances of the very processes being placed, several zones,
stale advertisements and loaded hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from placement.ask import AffinityRule, DeviceRequest, VolumeRequest
from placement.cell_offer import CellOffer, HostMetrics, Resources, RunningInstance, Volume
from placement.scheduler import schedule
from placement.testing import lrp_start, task_start
from placement.types import AuctionResult, SchedulerConfig
from placement.work import LRPStart, TaskStart
from tests.support.objective_texts import EXPRESSIONS

PROCESSES = ("app-0", "app-1", "app-2", "svc-3")
STACKS = ("cflinuxfs4", "cflinuxfs3")
TAGS = ("a", "b")
NOW = 100.0
LABEL_EXPRESSIONS = ("", "gpu=true", "tier in (web,db)", "gpu!=true", "!gpu", "tier", "tier=db,gpu")


@dataclass
class Workload:
    cells: list[CellOffer]
    lrps: list[LRPStart]
    tasks: list[TaskStart]
    seed: int
    config: dict[str, Any] = field(default_factory=dict)  # SchedulerConfig knobs beyond the strategy's


def run(workload: Workload, strategy: str, engine: str) -> AuctionResult:
    config = SchedulerConfig(strategy=strategy, engine=engine, seed=workload.seed, now=NOW, **workload.config)
    return schedule(workload.cells, workload.lrps, workload.tasks, config)


def assert_engines_agree(workload: Workload, strategy: str) -> AuctionResult:
    fast = run(workload, strategy, "fast")
    reference = run(workload, strategy, "reference")
    assert fast.lrp_assignments == reference.lrp_assignments
    assert fast.task_assignments == reference.task_assignments
    assert fast.failures == reference.failures
    return fast


@st.composite
def hosts(draw) -> HostMetrics | None:
    if draw(st.booleans()):
        return None
    return HostMetrics(
        swap_used_mb=draw(st.sampled_from([0.0, 100.0, 600.0])),
        swap_total_mb=draw(st.sampled_from([0.0, 1000.0])),
        mem_used_mb=draw(st.sampled_from([None, 500.0, 3000.0])),
        disk_used_mb=draw(st.sampled_from([None, 1000.0, 7000.0])),
        load5=draw(st.sampled_from([0.0, 3.0, 9.0, 20.0])),
        cores=draw(st.sampled_from([1, 2, 4])),
    )


@st.composite
def cells(draw, index: int, zones: int, service: bool) -> CellOffer:
    memory = draw(st.sampled_from([1024, 2048, 4096]))
    disk = draw(st.sampled_from([4096, 16384]))
    containers = draw(st.integers(2, 8))
    prefill = draw(st.lists(
        st.builds(
            RunningInstance,
            process_guid=st.sampled_from(PROCESSES),
            index=st.integers(0, 5),
            memory_mb=st.sampled_from([256, 512]),
            disk_mb=st.just(512),
            delayed_shutdown=st.booleans() if service else st.just(False),
        ),
        max_size=3,
    ))
    tasks = [f"old-task-{index}-{i}" for i in range(draw(st.integers(0, 2)))]
    used_m = sum(p.memory_mb for p in prefill)
    used_d = sum(p.disk_mb for p in prefill)
    used_c = len(prefill) + len(tasks)
    volumes: list[Volume] = []
    if service:
        for v in range(draw(st.integers(0, 2))):
            holder = draw(st.sampled_from([None, None, "svc-3/0", "svc-3/1", "app-0/0"]))
            volumes.append(Volume(
                name=f"vol-{v}",
                size_mb=draw(st.sampled_from([512, 2048])),
                labels=draw(st.sampled_from([{}, {"tier": "db"}, {"tier": "web"}])),
                ephemeral=holder is not None,
                holder=holder,
            ))
    return CellOffer(
        cell_id=f"cell-{index}",
        zone=f"z{(index + draw(st.integers(0, 1))) % zones}",
        total=Resources(memory, disk, containers),
        available=Resources(max(0, memory - used_m), max(0, disk - used_d), max(0, containers - used_c)),
        stacks=draw(st.sampled_from([STACKS, STACKS, STACKS[:1], STACKS[1:]])),
        placement_tags=draw(st.sampled_from([frozenset(), frozenset(), frozenset({"a"})])),
        optional_placement_tags=draw(st.sampled_from([frozenset(), frozenset({"a"}), frozenset(TAGS)])),
        labels=draw(st.sampled_from([{}, {"gpu": "true"}, {"tier": "web"}, {"tier": "db", "gpu": "false"}])),
        starting_containers=draw(st.integers(0, 2)),
        lrps=prefill,
        tasks=tasks,
        host=draw(hosts()),
        volumes=volumes,
        ingress_ips=[f"10.0.{index}.{i}" for i in range(draw(st.integers(0, 2)))] if service else [],
        devices=({"gpu": draw(st.integers(0, 2))} if draw(st.booleans()) else {}) if service else {},
        expires_at=draw(st.sampled_from([None, 150.0, 150.0, 50.0])),
    )


@st.composite
def lrp_group(draw, process_guid: str, cell_ids: list[str], service: bool, mixed: bool) -> list[LRPStart]:
    instances = draw(st.integers(1, 4))
    common = dict(
        memory_mb=draw(st.sampled_from([128, 256, 512, 1024])),
        disk_mb=draw(st.sampled_from([256, 1024, 4096])),
        stack=draw(st.sampled_from([STACKS[0], STACKS[0], STACKS[1]])),
        placement_tags=draw(st.sampled_from([(), (), ("a",), ("b",)])),
        strategy=draw(st.sampled_from([None, "diego", "dea", "loadmark", "service", "binpack", "random"]))
        if mixed else None,
    )
    if service:
        # at most one kind of hard constraint per LRP, so that most of them can still be placed
        constraint = draw(st.sampled_from(["none", "labels", "ingress", "devices", "volumes"]))
        if constraint == "labels":
            common["labels_match"] = draw(st.sampled_from(LABEL_EXPRESSIONS[1:]))
        elif constraint == "ingress":
            common["ingress_ip"] = True
        elif constraint == "devices":
            common["devices"] = (DeviceRequest("gpu", draw(st.integers(1, 2))),)
        elif constraint == "volumes":
            common["volumes"] = draw(st.sampled_from([
                (VolumeRequest("data", 1024, "", ephemeral=True),),
                (VolumeRequest("data", 256, "tier=db", ephemeral=True),),
            ]))
        common["affinity"] = draw(st.sampled_from([
            (),
            (AffinityRule("tier=web", 2.0),),
            (AffinityRule("gpu=true", -1.5), AffinityRule("tier", 0.5)),
        ]))
    lrps = []
    for index in range(instances):
        # the last cells first: hypothesis favours early elements, and cell-0 often wins ties anyway
        previous = draw(st.sampled_from([*reversed(cell_ids), None])) if service and cell_ids else None
        lrps.append(lrp_start(process_guid, index, previous_cell=previous, **common))
    return lrps


@st.composite
def workloads(draw, service: bool = False, mixed: bool = False, max_cells: int = 8) -> Workload:
    zones = draw(st.integers(1, 3))
    n_cells = draw(st.integers(1, max_cells))
    cell_list = [draw(cells(i, zones, service)) for i in range(n_cells)]
    cell_ids = [c.cell_id for c in cell_list]
    lrps: list[LRPStart] = []
    for pg in draw(st.sets(st.sampled_from(PROCESSES), min_size=1, max_size=3)):
        lrps.extend(draw(lrp_group(pg, cell_ids, service, mixed)))
    tasks = [
        task_start(
            f"task-{i}",
            memory_mb=draw(st.sampled_from([128, 512])),
            disk_mb=draw(st.sampled_from([256, 1024])),
            stack=draw(st.sampled_from([STACKS[0], STACKS[0], STACKS[1]])),
            placement_tags=draw(st.sampled_from([(), (), ("a",)])),
        )
        for i in range(draw(st.integers(0, 3)))
    ]
    return Workload(cell_list, lrps, tasks, draw(st.integers(0, 3)))


def make_cell(cell_id: str, zone: str = "z0", memory_mb: int = 4096, disk_mb: int = 8192,
              containers: int = 10, **fields) -> CellOffer:
    """A cell with nothing running: available = total (hand-written examples in the unit tests)."""
    return CellOffer(cell_id, zone, Resources(memory_mb, disk_mb, containers),
                Resources(memory_mb, disk_mb, containers), **fields)


def placements(result: AuctionResult) -> dict[str, str]:
    """`process_guid/index` or task guid -> cell id."""
    out = {f"{a.process_guid}/{a.index}": a.cell_id for a in result.lrp_assignments}
    out.update({a.task_guid: a.cell_id for a in result.task_assignments})
    return out


# --- the Diego and objective strategies' own inputs ------------------------------------------------------

DIEGO_APPS = [f"app{i}" for i in range(6)]


BLOBS = ("b1", "b2", "b3")


@st.composite
def diego_workloads(draw, cache: bool = False) -> Workload:
    """The Diego strategy's inputs: identical cells (its tie-breaks), tags and stacks, prefilled instances,
    and its knobs (starting weight, bin-pack weight, in-flight limit). `cache`: cells caching source blobs,
    apps naming one, and a cache weight (the cache term beyond Diego), from none to above an instance's
    1000."""
    blob_of = {app: draw(st.sampled_from([None, *BLOBS])) for app in DIEGO_APPS} if cache else {}
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
                prefill.append(RunningInstance(draw(st.sampled_from(DIEGO_APPS)), k, m, d))
                am, ad, ac = am - m, ad - d, ac - 1
        cells.append(CellOffer(
            f"c{i}", zones[i % len(zones)] if uniform else draw(st.sampled_from(zones)),
            Resources(tm, td, tc), Resources(am, ad, ac), lrps=prefill,
            stacks=draw(st.sampled_from([("cflinuxfs4",), ("cflinuxfs4", "windows")])),
            placement_tags=frozenset(draw(st.sampled_from([(), ("gpu",)]))),
            optional_placement_tags=frozenset(draw(st.sampled_from([(), ("ssd",)]))),
            starting_containers=draw(st.integers(0, 3)),
            tasks=[f"old{j}" for j in range(draw(st.integers(0, 2)))],
            cached_blobs=draw(st.frozensets(st.sampled_from(BLOBS), max_size=2)) if cache else frozenset(),
        ))
    lrps = []
    for _ in range(draw(st.integers(0, 40))):
        app = draw(st.sampled_from(DIEGO_APPS))
        lrps.append(lrp_start(
            app,
            draw(st.integers(0, 12)),
            draw(st.sampled_from([1, 2, 5, 9, 17])),
            draw(st.sampled_from([1, 3, 11])),
            stack=draw(st.sampled_from(["cflinuxfs4", "cflinuxfs4", "windows"])),
            placement_tags=draw(st.sampled_from([(), (), ("gpu",), ("ssd",)])),
            source_blob=blob_of.get(app),
        ))
    tasks = [task_start(f"t{j}", draw(st.sampled_from([1, 4, 13])), draw(st.sampled_from([1, 6])))
             for j in range(draw(st.integers(0, 8)))]
    config = dict(
        starting_container_weight=draw(st.sampled_from([0.25, 0.0, 2.0])),
        bin_pack_first_fit_weight=draw(st.sampled_from([0.0, 0.0, 0.3])),
        max_inflight_starts=draw(st.sampled_from([0, 0, 15])),
    )
    if cache:
        config["cache_weight"] = draw(st.sampled_from([0.0, 0.1, 0.25, 1.0, 1000.0, 2500.0]))
    return Workload(cells, lrps, tasks, 0, config)


OBJECTIVE_SPREAD = "r.AvailZoneNumber / 10 - count(ai.AppID, r.RunningAppIDs)"  # fewest of the app, then zone
OBJECTIVES = st.one_of(
    st.none(), st.sampled_from(["diego-blog", OBJECTIVE_SPREAD, "r.AvailableMemoryMB"]), EXPRESSIONS
)

OBJECTIVE_CELLS = st.lists(
    st.builds(
        lambda zone, memory, free, disk, blobs, prefill, stack: CellOffer(
            "", f"z{zone}", Resources(memory, disk, 8), Resources(min(free, memory), disk, 8),
            stacks=(stack,), cached_blobs=blobs,
            lrps=[RunningInstance(pg, i) for i, pg in enumerate(prefill)]),
        zone=st.integers(0, 3), memory=st.integers(0, 4096), free=st.integers(0, 4096),
        disk=st.integers(0, 4096), blobs=st.frozensets(st.sampled_from(["b1", "b2"]), max_size=2),
        prefill=st.lists(st.sampled_from(["app-1", "app-2", "web"]), max_size=3),
        stack=st.sampled_from(["cflinuxfs4", "cflinuxfs4", "cflinuxfs3"]),
    ),
    min_size=1, max_size=8,
)

OBJECTIVE_LRPS = st.lists(
    st.builds(
        lambda pg, index, memory, disk, objective, blob, total: lrp_start(
            pg, index, memory, disk, objective=objective, source_blob=blob, total_instances=total),
        pg=st.sampled_from(["app-1", "app-2", "web", "task-3"]), index=st.integers(0, 4),
        memory=st.integers(1, 1500), disk=st.integers(1, 1500),
        objective=OBJECTIVES,
        blob=st.sampled_from([None, "b1", "b2"]), total=st.integers(0, 3),
    ),
    max_size=10,
)




@st.composite
def objective_workloads(draw) -> Workload:
    """The objective strategy's inputs: objectives (presets, expressions), source blobs and cached ones."""
    cells = draw(OBJECTIVE_CELLS)
    for i, c in enumerate(cells):
        c.cell_id = f"cell-{i}"
    tasks = draw(st.lists(st.builds(task_start, st.sampled_from(["t-1", "t-2", "batch"]), st.integers(1, 900),
                                    st.integers(1, 900)), max_size=3))
    return Workload(cells, draw(OBJECTIVE_LRPS), tasks, 0)
