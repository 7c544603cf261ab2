from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from common.labels import parse_label_expression
from tests.support.engine_workloads import make_cell

from .rebalance import CELL_LOAD, ZONE_SPREAD, Placed, RebalanceConfig, plan_moves
from .scheduler import schedule
from .types import Cell, LRPStart, Resources, RunningInstance, SchedulerConfig, Volume, VolumeRequest


def holding(cells: list[Cell], placed: list[Placed], requests: dict[str, LRPStart]) -> list[Cell]:
    """The cells with these instances on them: their resources taken, the instances listed."""
    by_id = {c.cell_id: c for c in cells}
    for p in placed:
        cell, item = by_id[p.cell_id], requests[p.process_guid]
        cell.available = Resources(
            cell.available.memory_mb - item.memory_mb,
            cell.available.disk_mb - item.disk_mb,
            cell.available.containers - 1,
        )
        cell.lrps.append(RunningInstance(p.process_guid, p.index, item.memory_mb, item.disk_mb))
    return cells


def zone_of(moves_cells: list[Cell]) -> dict[str, str]:
    return {c.cell_id: c.zone for c in moves_cells}


def after_moves(placed: list[Placed], moves) -> list[Placed]:
    where = {(p.process_guid, p.index): p.cell_id for p in placed}
    for m in moves:
        assert where[(m.process_guid, m.index)] == m.from_cell
        where[(m.process_guid, m.index)] = m.to_cell
    return [Placed(pg, i, c) for (pg, i), c in where.items()]


def test_an_evacuated_zone_that_returns_gets_its_share_back():
    cells = [make_cell(f"{z}{i}", z) for z in ("a", "b") for i in range(2)]
    requests = {"web": LRPStart("web", 0, 256, 1)}
    placed = [Placed("web", i, f"a{i % 2}") for i in range(6)]
    moves = plan_moves(holding(cells, placed, requests), placed, requests)
    assert [m.reason for m in moves] == [ZONE_SPREAD] * 3
    assert {m.to_cell for m in moves} == {"b0", "b1"}  # the auction's score spreads them over the zone
    assert Counter(zone_of(cells)[p.cell_id] for p in after_moves(placed, moves)) == {"a": 3, "b": 3}
    assert moves[0].gain == 2 and moves[0].detail == "a->b instances 6/0"


def test_a_balanced_cluster_needs_no_move_and_max_moves_bounds_the_plan():
    cells = [make_cell(f"{z}0", z) for z in ("a", "b")]
    requests = {"web": LRPStart("web", 0, 256, 1)}
    balanced = [Placed("web", i, ("a0", "b0")[i % 2]) for i in range(5)]
    assert plan_moves(holding(cells, balanced, requests), balanced, requests) == []
    cells = [make_cell(f"{z}0", z) for z in ("a", "b")]
    skewed = [Placed("web", i, "a0") for i in range(6)]
    moves = plan_moves(
        holding(cells, skewed, requests), skewed, requests, rebalance=RebalanceConfig(max_moves=1)
    )
    assert len(moves) == 1


def test_a_zone_without_room_or_without_the_tag_is_left_alone():
    cells = [
        make_cell("a0", "a"),
        make_cell("b0", "b", memory_mb=300),
        make_cell("c0", "c", placement_tags=frozenset({"gpu"})),
    ]
    requests = {"web": LRPStart("web", 0, 256, 1)}
    placed = [Placed("web", i, "a0") for i in range(4)]
    moves = plan_moves(holding(cells, placed, requests), placed, requests)
    assert [m.to_cell for m in moves] == ["b0"]  # b has room for one; c only takes gpu work


def test_pinned_apps_and_instances_holding_their_volume_stay():
    requests = {
        "db": LRPStart("db", 0, 256, 1),
        "kv": LRPStart("kv", 0, 256, 1, volumes=(VolumeRequest("data", 10, ephemeral=True),)),
    }
    cells = [
        make_cell("a0", "a", volumes=[Volume("v", 100, ephemeral=True, holder=f"kv/{i}") for i in range(4)]),
        make_cell("b0", "b", volumes=[Volume("v", 100) for _ in range(4)]),
    ]
    placed = [Placed(pg, i, "a0") for pg in ("db", "kv") for i in range(4)]
    assert plan_moves(holding(cells, placed, requests), placed, requests, pinned_apps={"db"}) == []


def test_a_joining_cell_takes_load_from_the_fullest_cells():
    cells = [make_cell(f"a{i}", "a", memory_mb=2048) for i in range(2)] + [
        make_cell("a2", "a", memory_mb=2048)
    ]
    requests = {f"app{k}": LRPStart(f"app{k}", 0, 256, 1) for k in range(2)}
    placed = [Placed(f"app{k}", i, f"a{k}") for k in range(2) for i in range(6)]  # a2 joined empty
    moves = plan_moves(
        holding(cells, placed, requests), placed, requests, rebalance=RebalanceConfig(load_tolerance=0.1)
    )
    assert moves and all(m.reason == CELL_LOAD and m.to_cell == "a2" for m in moves)
    used = Counter()
    for p in after_moves(placed, moves):
        used[p.cell_id] += 256
    fractions = [used[c] / 2048 for c in ("a0", "a1", "a2")]
    mean = sum(fractions) / 3
    assert max(fractions) <= mean + 0.1, fractions


def test_only_the_apps_asked_for_move():
    cells = [make_cell(f"{z}0", z) for z in ("a", "b")]
    requests = {pg: LRPStart(pg, 0, 128, 1) for pg in ("web", "api")}
    placed = [Placed(pg, i, "a0") for pg in ("web", "api") for i in range(4)]
    moves = plan_moves(
        holding(cells, placed, requests), placed, requests, rebalance=RebalanceConfig(apps=frozenset({"api"}))
    )
    assert {m.process_guid for m in moves} == {"api"}


# --- property: over random clusters, a planned move never breaks a constraint -----------------------

TAGS = ("", "gpu", "ssd")
LABELS = ("", "disk=ssd", "disk!=ssd")


@st.composite
def clusters(draw):
    zones = draw(st.integers(2, 3))
    cells = []
    for z in range(zones):
        for i in range(draw(st.integers(1, 4))):
            tag = draw(st.sampled_from(TAGS))
            cells.append(
                make_cell(
                    f"z{z}c{i}",
                    f"z{z}",
                    memory_mb=draw(st.sampled_from((1024, 2048, 4096))),
                    containers=40,
                    placement_tags=frozenset({tag} if tag else ()),
                    labels={"disk": draw(st.sampled_from(("ssd", "hdd")))},
                    volumes=[Volume("v", 100) for _ in range(draw(st.integers(0, 3)))],
                )
            )
    requests = {}
    for a in range(draw(st.integers(1, 4))):
        tag, label = draw(st.sampled_from(TAGS)), draw(st.sampled_from(LABELS))
        volumes = (VolumeRequest("data", 10, ephemeral=True),) if draw(st.booleans()) else ()
        requests[f"app{a}"] = LRPStart(
            f"app{a}",
            0,
            draw(st.sampled_from((128, 256, 512))),
            1,
            placement_tags=(tag,) if tag else (),
            labels_match=label,
            volumes=volumes,
            total_instances=draw(st.integers(1, 8)),
        )
    outage = draw(st.sampled_from(sorted({c.zone for c in cells})))
    return cells, requests, outage


def placed_by_the_auction(cells, requests, outage):
    """The instances placed by the engine while one zone was out, then that zone back (empty)."""
    up = [c for c in cells if c.zone != outage]
    starts = [
        LRPStart(**{**{f: getattr(r, f) for f in r.__slots__}, "index": i})
        for r in requests.values()
        for i in range(r.total_instances)
    ]
    result = schedule(up, starts, config=SchedulerConfig())
    placed = [Placed(a.process_guid, a.index, a.cell_id) for a in result.lrp_assignments]
    by_id = {c.cell_id: c for c in cells}
    for p in placed:  # an ephemeral volume is held where its instance runs
        if requests[p.process_guid].volumes:
            cell = by_id[p.cell_id]
            free = next(i for i, v in enumerate(cell.volumes) if v.holder is None)
            cell.volumes[free] = Volume("v", 100, ephemeral=True, holder=f"{p.process_guid}/{p.index}")
    return holding(cells, placed, requests), placed


def tags_fit(cell: Cell, item: LRPStart) -> bool:
    wanted = set(item.placement_tags)
    return cell.placement_tags <= wanted and wanted <= cell.placement_tags | cell.optional_placement_tags


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_moves_keep_every_constraint_and_the_room(cluster):
    cells, requests, outage = cluster
    cells, placed = placed_by_the_auction(cells, requests, outage)
    by_id = {c.cell_id: c for c in cells}
    moves = plan_moves(cells, placed, requests)
    held_volume = {v.holder for c in cells for v in c.volumes if v.holder}
    for m in moves:
        item, target = requests[m.process_guid], by_id[m.to_cell]
        assert tags_fit(target, item), m
        assert not item.labels_match or parse_label_expression(item.labels_match).matches(target.labels), m
        assert f"{m.process_guid}/{m.index}" not in held_volume, m  # volume stickiness
    final = after_moves(placed, moves)
    used = Counter()
    for p in final:
        used[p.cell_id] += requests[p.process_guid].memory_mb
    for c in cells:
        assert used[c.cell_id] <= c.total.memory_mb, c.cell_id
    # every app that may move, where room allows, ends within one instance per eligible zone
    for pg, item in requests.items():
        if item.volumes:
            continue
        fitting = [
            c
            for c in cells
            if tags_fit(c, item)
            and (not item.labels_match or parse_label_expression(item.labels_match).matches(c.labels))
        ]
        eligible = {c.zone for c in fitting}
        counts = Counter(by_id[p.cell_id].zone for p in final if p.process_guid == pg)
        values = [counts.get(z, 0) for z in eligible]
        if values and max(values) - min(values) > 1:
            emptiest = min(eligible, key=lambda z: counts.get(z, 0))
            room = [
                c
                for c in fitting
                if c.zone == emptiest and c.total.memory_mb - used[c.cell_id] >= item.memory_mb
            ]
            assert not room, (pg, counts, emptiest)
