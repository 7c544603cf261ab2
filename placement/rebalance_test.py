import dataclasses
from collections import Counter

from hypothesis import event, given, settings
from hypothesis import strategies as st

from common.labels import parse_label_expression
from placement.testing import holding, lrp_start
from tests.support.engine_workloads import hosts, make_cell

from .ask import VolumeRequest
from .cell_offer import CellOffer, Volume
from .rebalance import (
    CELL_LOAD,
    LOAD_MARK,
    STRATEGY_MARGIN,
    ZONE_SPREAD,
    Move,
    Placed,
    RebalanceConfig,
    plan_moves,
)
from .rebalance.strategy_scores import strategy_score
from .scheduler import schedule
from .slot import CellSlot
from .state import AuctionState
from .strategies.loadmark import above_critical, load_mark
from .types import LoadMarkConfig, SchedulerConfig
from .work import LRPStart


def zone_of(moves_cells: list[CellOffer]) -> dict[str, str]:
    return {c.cell_id: c.zone for c in moves_cells}


def after_moves(placed: list[Placed], moves) -> list[Placed]:
    where = {(p.process_guid, p.index): p.cell_id for p in placed}
    for m in moves:
        assert where[(m.process_guid, m.index)] == m.from_cell
        where[(m.process_guid, m.index)] = m.to_cell
    return [Placed(pg, i, c) for (pg, i), c in where.items()]


def test_an_evacuated_zone_that_returns_gets_its_share_back():
    cells = [make_cell(f"{z}{i}", z) for z in ("a", "b") for i in range(2)]
    requests = {"web": lrp_start("web", 0, 256, 1)}
    placed = [Placed("web", i, f"a{i % 2}") for i in range(6)]
    moves = plan_moves(holding(cells, placed, requests), placed, requests)
    assert [m.reason for m in moves] == [ZONE_SPREAD] * 3
    assert {m.to_cell for m in moves} == {"b0", "b1"}  # the auction's score spreads them over the zone
    assert Counter(zone_of(cells)[p.cell_id] for p in after_moves(placed, moves)) == {"a": 3, "b": 3}
    assert moves[0].gain == 2 and moves[0].detail == "a->b instances 6/0"


def test_a_balanced_cluster_needs_no_move_and_max_moves_bounds_the_plan():
    cells = [make_cell(f"{z}0", z) for z in ("a", "b")]
    requests = {"web": lrp_start("web", 0, 256, 1)}
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
    requests = {"web": lrp_start("web", 0, 256, 1)}
    placed = [Placed("web", i, "a0") for i in range(4)]
    moves = plan_moves(holding(cells, placed, requests), placed, requests)
    assert [m.to_cell for m in moves] == ["b0"]  # b has room for one; c only takes gpu work


def test_pinned_apps_and_instances_holding_their_volume_stay():
    requests = {
        "db": lrp_start("db", 0, 256, 1),
        "kv": lrp_start("kv", 0, 256, 1, volumes=(VolumeRequest("data", 10, ephemeral=True),)),
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
    requests = {f"app{k}": lrp_start(f"app{k}", 0, 256, 1) for k in range(2)}
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
    requests = {pg: lrp_start(pg, 0, 128, 1) for pg in ("web", "api")}
    placed = [Placed(pg, i, "a0") for pg in ("web", "api") for i in range(4)]
    moves = plan_moves(
        holding(cells, placed, requests), placed, requests, rebalance=RebalanceConfig(apps=frozenset({"api"}))
    )
    assert {m.process_guid for m in moves} == {"api"}


# --- property: over random clusters, a planned move never breaks a constraint -----------------------

TAGS = ("", "gpu", "ssd")
LABELS = ("", "disk=ssd", "disk!=ssd")
# the strategies with a comparable score (None: diego) more often than the others
STRATEGIES = (None, None, None, "loadmark", "loadmark", "objective", "dea", "service", "binpack", "random")
MARKS = LoadMarkConfig()


@st.composite
def clusters(draw):
    zones = draw(st.integers(1, 3))  # one zone: no spread to restore, the later rules alone
    cells = []
    for z in range(zones):
        for i in range(draw(st.integers(1, 5))):
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
                    host=draw(hosts()),
                )
            )
    requests = {}
    for a in range(draw(st.integers(1, 4))):
        tag, label = draw(st.sampled_from(TAGS)), draw(st.sampled_from(LABELS))
        volumes = (VolumeRequest("data", 10, ephemeral=True),) if draw(st.booleans()) else ()
        requests[f"app{a}"] = lrp_start(
            f"app{a}",
            0,
            draw(st.sampled_from((128, 256, 512))),
            1,
            placement_tags=(tag,) if tag else (),
            labels_match=label,
            volumes=volumes,
            strategy=draw(st.sampled_from(STRATEGIES)),
            total_instances=draw(st.integers(1, 8)),
        )
    outage = draw(st.sampled_from(sorted({c.zone for c in cells}))) if zones > 1 else None
    pinned = draw(st.sets(st.sampled_from(sorted(requests)), max_size=2))  # keep-replicas apps
    # None: the auction placed everything; else each instance went to the fitting cell with room these
    # numbers pick (an older placement, cells that joined since: what the later rules find to move)
    scatter = draw(st.none() | st.lists(st.integers(0, 99), min_size=32, max_size=32))
    return cells, requests, outage, pinned, scatter


def placed_by_the_auction(cells, requests, outage, scatter=None):
    """The instances placed by the engine while one zone was out, then that zone back (empty); with
    `scatter`, placed at random instead (see `clusters`)."""
    up = [c for c in cells if c.zone != outage]
    starts = [
        dataclasses.replace(r, index=i)
        for r in requests.values()
        for i in range(r.total_instances)
    ]
    if scatter is None:
        result = schedule(up, starts, config=SchedulerConfig())
        placed = [Placed(a.process_guid, a.index, a.cell_id) for a in result.lrp_assignments]
    else:
        placed = scattered(up, starts, scatter)
    by_id = {c.cell_id: c for c in cells}
    for p in placed:  # an ephemeral volume is held where its instance runs
        if requests[p.process_guid].ask.volumes:
            cell = by_id[p.cell_id]
            free = next(i for i, v in enumerate(cell.volumes) if v.holder is None)
            cell.volumes[free] = Volume("v", 100, ephemeral=True, holder=f"{p.process_guid}/{p.index}")
    return holding(cells, placed, requests), placed


def scattered(cells: list[CellOffer], starts: list[LRPStart], picks: list[int]) -> list[Placed]:
    """Each instance on the fitting cell with room (memory, a container, a free volume if it asks for one)
    that the next pick chooses."""
    memory = {c.cell_id: c.available.memory_mb for c in cells}
    slots = {c.cell_id: c.available.containers for c in cells}
    volumes = {c.cell_id: len(c.volumes) for c in cells}
    placed = []
    for n, item in enumerate(starts):
        fitting = [
            c
            for c in cells
            if fits(c, item)
            and memory[c.cell_id] >= item.ask.memory_mb
            and slots[c.cell_id] > 0
            and (not item.ask.volumes or volumes[c.cell_id] > 0)
        ]
        if fitting:
            cell = fitting[picks[n % len(picks)] % len(fitting)]
            memory[cell.cell_id] -= item.ask.memory_mb
            slots[cell.cell_id] -= 1
            volumes[cell.cell_id] -= bool(item.ask.volumes)
            placed.append(Placed(item.process_guid, item.index, cell.cell_id))
    return placed


def tags_fit(cell: CellOffer, item: LRPStart) -> bool:
    wanted = set(item.ask.placement_tags)
    return cell.placement_tags <= wanted and wanted <= cell.placement_tags | cell.optional_placement_tags


def fits(cell: CellOffer, item: LRPStart) -> bool:
    """Tags and label expression: what the app asks of a cell whatever its load."""
    labels = not item.ask.labels_match or parse_label_expression(item.ask.labels_match).matches(cell.labels)
    return tags_fit(cell, item) and labels


def is_loadmark(item: LRPStart) -> bool:
    return item.ask.strategy == "loadmark"


class Replay:
    """The cells as each move leaves them (the engine's cell slots, moved by hand), to check every move
    against the state it was planned on."""

    def __init__(self, cells: list[CellOffer], requests: dict[str, LRPStart]) -> None:
        self.slots = {s.cell_id: s for s in AuctionState(cells, SchedulerConfig()).slots}
        self.zone = {c.cell_id: c.zone for c in cells}
        self.requests = requests
        self.where: dict[str, Counter[str]] = {}

    def place(self, placed: list[Placed]) -> None:
        for p in placed:
            self.where.setdefault(p.process_guid, Counter())[self.zone[p.cell_id]] += 1

    def apply(self, m: Move) -> None:
        item = self.requests[m.process_guid]
        for cell_id, sign in ((m.from_cell, 1), (m.to_cell, -1)):
            slot = self.slots[cell_id]
            slot.avail_m += sign * item.ask.memory_mb
            slot.avail_d += sign * item.ask.disk_mb
            slot.avail_c += sign
            slot.proc_counts[m.process_guid] = slot.proc_counts.get(m.process_guid, 0) - sign
        self.where[m.process_guid][m.from_zone] -= 1
        self.where[m.process_guid][m.to_zone] += 1

    def skew(self, pg: str, zones: set[str]) -> int:
        values = [self.where[pg][z] for z in zones]
        return max(values) - min(values) if values else 0

    def memory_mean(self) -> float:
        return sum(memory(s) for s in self.slots.values()) / len(self.slots)

    def mark_mean(self, cell_ids: set[str]) -> float:
        return sum(load_mark(self.slots[c], MARKS) for c in cell_ids) / max(1, len(cell_ids))


def memory(slot: CellSlot) -> float:
    return 1.0 - slot.avail_m / slot.total_m


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_moves_keep_every_constraint_and_the_room(cluster):
    cells, requests, outage, pinned, scatter = cluster
    cells, placed = placed_by_the_auction(cells, requests, outage, scatter)
    check_plan(cells, placed, requests, pinned)


@st.composite
def crowded_zones(draw):
    """One zone of cells with few containers and loaded hosts, apps of the strategies with a score,
    scattered: what the load, load-mark and margin rules find to move."""
    cells = [
        make_cell(
            f"z0c{i}",
            "z0",
            memory_mb=draw(st.sampled_from((1024, 2048, 4096))),
            containers=draw(st.integers(3, 12)),
            labels={"disk": draw(st.sampled_from(("ssd", "hdd")))},
            host=draw(hosts()),
        )
        for i in range(draw(st.integers(2, 6)))
    ]
    requests = {
        f"app{a}": lrp_start(
            f"app{a}",
            0,
            draw(st.sampled_from((64, 128, 256))),
            draw(st.sampled_from((1, 2048))),
            labels_match=draw(st.sampled_from(LABELS)),
            strategy=draw(st.sampled_from((None, "loadmark", "objective"))),
            total_instances=draw(st.integers(1, 8)),
        )
        for a in range(draw(st.integers(1, 4)))
    }
    pinned = draw(st.sets(st.sampled_from(sorted(requests)), max_size=1))
    picks = draw(st.lists(st.integers(0, 99), min_size=32, max_size=32))
    return cells, requests, pinned, picks


@settings(max_examples=300, deadline=None)
@given(crowded_zones())
def test_moves_within_a_crowded_zone_keep_every_constraint(cluster):
    cells, requests, pinned, picks = cluster
    cells, placed = placed_by_the_auction(cells, requests, None, picks)
    check_plan(cells, placed, requests, pinned)


def check_plan(cells: list[CellOffer], placed: list[Placed], requests: dict[str, LRPStart], pinned: set[str]):
    """Plan, then check every move against the state it was planned on, and the spread at the end."""
    by_id = {c.cell_id: c for c in cells}
    held_volume = {v.holder for c in cells for v in c.volumes if v.holder}
    zones = {pg: {c.zone for c in cells if fits(c, item)} for pg, item in requests.items()}
    movable = {p.process_guid for p in placed if p.process_guid not in pinned and not held(p, held_volume)}
    # the cells the loadmark apps that may move can run on: their load marks' mean
    loadmark_apps = [requests[pg] for pg in movable if is_loadmark(requests[pg])]
    marked = {c.cell_id for c in cells for item in loadmark_apps if fits(c, item)}
    replay = Replay(cells, requests)
    replay.place(placed)
    moves = plan_moves(cells, placed, requests, pinned_apps=pinned)
    for m in moves:
        event(f"moves: {m.reason}")  # --hypothesis-show-statistics: how often each rule was exercised
        item, target, slot = requests[m.process_guid], by_id[m.to_cell], replay.slots[m.to_cell]
        assert m.process_guid not in pinned, m  # keep-replicas
        assert fits(target, item), m  # placement tags, label expression
        assert not held(Placed(m.process_guid, m.index, m.from_cell), held_volume), m  # volume stickiness
        ask = item.ask
        assert slot.avail_m >= ask.memory_mb and slot.avail_d >= ask.disk_mb and slot.avail_c >= 1, m
        if is_loadmark(item):
            assert not above_critical(slot, MARKS), m  # the strategy's own filter, as the auction judges
        memory_mean, mark_mean = replay.memory_mean(), replay.mark_mean(marked)
        skew = replay.skew(m.process_guid, zones[m.process_guid])
        replay.apply(m)
        assert replay.skew(m.process_guid, zones[m.process_guid]) <= max(1, skew), m  # the spread holds
        if m.reason in (LOAD_MARK, STRATEGY_MARGIN):  # nor do the later rules overload their targets
            assert memory(slot) <= memory_mean + 0.1 + 1e-9, m
            if is_loadmark(item):
                assert load_mark(slot, MARKS) <= mark_mean + 10 + 1e-9 and not above_critical(slot, MARKS), m
        if m.reason == STRATEGY_MARGIN:
            scoring = strategy_score(item.ask.strategy or "diego")
            assert scoring is not None and m.gain > 0.2 * scoring.unit, m
        if m.reason == CELL_LOAD:
            assert not is_loadmark(item), m  # their load is the load mark
    # every app that may move by the auction's own chain, where room allows, ends within one instance per
    # zone, unless what its fullest zones hold moved there in this plan already (an instance moves once a
    # plan; the next plan finishes the spread) — loadmark apps may find every cell of a zone above a
    # critical mark: not room
    final = after_moves(placed, moves)
    moved = {(m.process_guid, m.index) for m in moves}
    used = Counter()
    for p in final:
        used[p.cell_id] += requests[p.process_guid].ask.memory_mb
    for pg, item in requests.items():
        if pg not in movable or item.ask.volumes or is_loadmark(item):
            continue
        counts = replay.where[pg]
        if replay.skew(pg, zones[pg]) > 1:
            emptiest = min(zones[pg], key=lambda z: counts[z])
            room = [
                c
                for c in cells
                if c.zone == emptiest
                and fits(c, item)
                and c.total.memory_mb - used[c.cell_id] >= item.ask.memory_mb
            ]
            most = max(counts[z] for z in zones[pg])
            fullest = [p for p in final if p.process_guid == pg and counts[by_id[p.cell_id].zone] == most]
            stuck = all((p.process_guid, p.index) in moved for p in fullest)
            assert not room or stuck, (pg, counts, emptiest)


def held(p: Placed, held_volume: set[str | None]) -> bool:
    return f"{p.process_guid}/{p.index}" in held_volume
