"""Convergence decisions as a pure function of rows and `now`."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from bbs.actual_set import ActualSet
from bbs.cell_loss import CellLossConfig
from bbs.cell_probes import Probe
from bbs.convergence import (
    CELL_DISAPPEARED,
    CELL_RESTARTED,
    NOT_STARTED_IN_TIME,
    ConvergenceConfig,
    converge,
    evacuate,
    fail_tasks_of_rebooted_cells,
    forget_rebooted_cell,
    resize,
    settle,
)
from bbs.lifecycle import Stop
from bbs.placements import PlacementLog
from bbs.records import (
    CLAIMED,
    CRASHED,
    EVACUATING,
    KEEP_REPLICAS,
    ORDINARY,
    RUNNING,
    SUSPECT,
    UNCLAIMED,
    ActualRecord,
    CellRecord,
    DesiredRecord,
    TaskRecord,
    fresh_instances,
    unclaimed,
)

CONFIG = ConvergenceConfig()


def desired(instances: int = 2, pg: str = "web", on_cell_loss: str = "reschedule") -> DesiredRecord:
    return DesiredRecord(pg, "d", instances, {}, 0.0, "e", on_cell_loss=on_cell_loss)


def on_cell(
    index: int, cell: str = "c1", state: str = RUNNING, presence: str = ORDINARY, guid: str = ""
) -> ActualRecord:
    return dataclasses.replace(
        unclaimed("web", index, "d", 0.0),
        state=state,
        cell_id=cell,
        instance_guid=guid or f"i{index}",
        presence=presence,
    )


def cell(cell_id: str = "c1", expires_at: float = 1000.0, disappeared: bool = False) -> dict[str, CellRecord]:
    return {
        cell_id: CellRecord(cell_id, {"rep_url": f"http://{cell_id}", "zone": "z"}, expires_at, disappeared)
    }


def test_missing_indices_are_created_and_auctioned_extra_ones_removed_and_stopped() -> None:
    actuals = ActualSet([on_cell(0), on_cell(5)])
    out = converge([desired(3)], actuals, [], cell(), 10.0, CONFIG)
    assert out.starts == {"web": {1, 2}}
    assert out.stops == [Stop("c1", "web", 5, "i5")]
    changes = actuals.diff()
    assert sorted(r.index for r in changes.inserts) == [1, 2]
    assert [r.index for r in changes.deletes] == [5]


def test_extra_instances_of_a_stale_domain_are_kept_until_it_is_fresh_again() -> None:
    # Diego's freshness: whoever keeps domain "d" fresh may not have finished desiring (docs/diego-api.md).
    stale = dataclasses.replace(CONFIG, stale_domains=frozenset({"d"}))
    actuals = ActualSet([on_cell(0), on_cell(5)])
    out = converge([desired(1)], actuals, [], cell(), 10.0, stale)
    assert out.stops == [] and actuals.diff().deletes == []
    orphans = ActualSet([on_cell(0)])
    assert converge([], orphans, [], cell(), 10.0, stale).stops == [] and orphans.diff().deletes == []
    other = dataclasses.replace(CONFIG, stale_domains=frozenset({"another"}))
    assert converge([desired(1)], ActualSet([on_cell(0), on_cell(5)]), [], cell(), 10.0, other).stops == [
        Stop("c1", "web", 5, "i5")]


def test_actuals_of_a_removed_desired_lrp_go() -> None:
    actuals = ActualSet([on_cell(0), unclaimed("web", 1, "d", 0.0)])
    out = converge([], actuals, [], cell(), 10.0, CONFIG)
    assert len(actuals.diff().deletes) == 2 and out.stops == [Stop("c1", "web", 0, "i0")]


def test_stale_unclaimed_is_auctioned_again_once_per_period() -> None:
    actuals = ActualSet([unclaimed("web", 0, "d", 0.0)])
    assert converge([desired(1)], actuals, [], {}, 29.0, CONFIG).starts == {}
    out = converge([desired(1)], actuals, [], {}, 30.0, CONFIG)
    assert out.starts == {"web": {0}}
    # The re-auction is bookkeeping: no new modification tag, so no event.
    changes = actuals.diff()
    assert len(changes.updates) == 1 and changes.visible_updates == []
    assert converge([desired(1)], ActualSet(list(actuals)), [], {}, 45.0, CONFIG).starts == {}


def test_crashed_is_restarted_when_its_backoff_elapsed() -> None:
    row = dataclasses.replace(unclaimed("web", 0, "d", 0.0), state=CRASHED, crash_count=4, since=100.0)
    assert converge([desired(1)], ActualSet([row]), [], {}, 159.0, CONFIG).starts == {}
    actuals = ActualSet([row])
    assert converge([desired(1)], actuals, [], {}, 160.0, CONFIG).starts == {"web": {0}}
    assert (actuals.get("web", 0).state, actuals.get("web", 0).crash_count) == (UNCLAIMED, 4)
    never = dataclasses.replace(row, crash_count=201)
    assert converge([desired(1)], ActualSet([never]), [], {}, 1e9, CONFIG).starts == {}


def test_instances_on_an_expired_cell_become_suspect_with_a_replacement() -> None:
    actuals = ActualSet([on_cell(0), on_cell(1, state=CLAIMED)])
    out = converge([desired(2)], actuals, [], cell(expires_at=5.0), 10.0, CONFIG)
    assert out.starts == {"web": {0, 1}}
    assert [(r.index, r.presence) for r in actuals if r.presence == SUSPECT] == [(0, SUSPECT), (1, SUSPECT)]
    assert all(actuals.get("web", i).state == UNCLAIMED for i in (0, 1))
    assert [c.cell_id for c in out.cells_disappeared] == ["c1"]


def test_suspect_is_promoted_back_when_its_cell_returns_before_the_replacement_runs() -> None:
    replacement = on_cell(0, cell="c2", state=CLAIMED, guid="new")
    actuals = ActualSet([on_cell(0, presence=SUSPECT), replacement])
    cells = {**cell("c1", expires_at=100.0), **cell("c2", expires_at=100.0)}
    out = converge([desired(1)], actuals, [], cells, 10.0, CONFIG)
    assert [(r.presence, r.instance_guid) for r in actuals] == [(ORDINARY, "i0")]
    assert out.stops == [Stop("c2", "web", 0, "new")] and out.starts == {}


def test_suspect_is_dropped_once_its_replacement_runs() -> None:
    actuals = ActualSet([on_cell(0, presence=SUSPECT), on_cell(0, cell="c2", guid="new")])
    cells = {**cell("c1", expires_at=5.0), **cell("c2", expires_at=100.0)}
    out = converge([desired(1)], actuals, [], cells, 10.0, CONFIG)
    assert [(r.presence, r.instance_guid) for r in actuals] == [(ORDINARY, "new")]
    assert out.stops == [Stop("c1", "web", 0, "i0")]


def test_evacuating_instance_of_a_vanished_cell_is_removed() -> None:
    actuals = ActualSet([on_cell(0, presence=EVACUATING), unclaimed("web", 0, "d", 9.0)])
    converge([desired(1)], actuals, [], cell(expires_at=5.0), 10.0, CONFIG)
    assert [r.presence for r in actuals] == [ORDINARY]


def test_evacuate_converts_running_instances_and_is_idempotent() -> None:
    actuals = ActualSet([on_cell(0), on_cell(1, state=CLAIMED), on_cell(2, cell="c2")])
    assert evacuate(actuals, "c1", 5.0) == {"web": {0}}
    assert actuals.get("web", 0, EVACUATING).instance_guid == "i0"
    assert actuals.get("web", 0).state == UNCLAIMED
    assert evacuate(actuals, "c1", 6.0) == {}


def test_a_rebooted_cell_loses_what_it_held_and_nothing_else() -> None:
    actuals = ActualSet([
        on_cell(0), on_cell(1, state=CLAIMED), on_cell(2, presence=SUSPECT), on_cell(2, cell="c2", guid="r2"),
        on_cell(3, cell="c2"),
    ])
    assert forget_rebooted_cell(actuals, "c1", 7.0) == {"web": {0, 1}}
    assert [(r.index, r.state, r.cell_id) for r in actuals if r.index in (0, 1)] == \
        [(0, UNCLAIMED, ""), (1, UNCLAIMED, "")]
    assert actuals.other("web", 2) is None  # the suspect copy on c1 is gone; its replacement stays
    assert actuals.get("web", 2).instance_guid == "r2" and actuals.get("web", 3).cell_id == "c2"


def test_a_rebooted_cell_fails_the_tasks_it_ran_and_no_other() -> None:
    tasks = [task("RUNNING", cell_id="c1"),
             dataclasses.replace(task("RUNNING", cell_id="c2"), task_guid="t2"),
             dataclasses.replace(task("COMPLETED", cell_id="c1"), task_guid="t3")]
    [failed] = fail_tasks_of_rebooted_cells(tasks, {"c1"}, 9.0)
    assert (failed.task_guid, failed.state, failed.failed, failed.failure_reason) == (
        "t", "COMPLETED", True, CELL_RESTARTED)
    assert failed.first_completed_at == 9.0
    assert fail_tasks_of_rebooted_cells(tasks, set(), 9.0) == []


def test_resize_down_and_up() -> None:
    actuals = ActualSet([on_cell(0), on_cell(1), unclaimed("web", 2, "d", 0.0)])
    out = resize(desired(1), actuals, 3.0)
    assert out.stops == [Stop("c1", "web", 1, "i1")] and out.starts == {}
    assert [r.index for r in actuals] == [0]
    assert resize(desired(3), actuals, 4.0).starts == {"web": {1, 2}}


def task(state: str = "PENDING", **fields) -> TaskRecord:
    return TaskRecord("t", "d", {"command": ["x"]}, state=state, created_at=0.0, updated_at=0.0, **fields)


def test_task_rules() -> None:
    out = converge([], ActualSet(), [task()], {}, 30.0, CONFIG)
    assert [t.task_guid for t in out.tasks_to_kick] == ["t"]
    assert converge([], ActualSet(), [task(auctioned_at=20.0)], {}, 30.0, CONFIG).tasks_to_kick == []
    out = converge([], ActualSet(), [task()], {}, 1800.0, CONFIG)
    assert (
        out.tasks_failed[0].failure_reason == NOT_STARTED_IN_TIME and out.tasks_failed[0].state == "COMPLETED"
    )
    out = converge([], ActualSet(), [task("RUNNING", cell_id="c1")], cell(expires_at=5.0), 10.0, CONFIG)
    assert out.tasks_failed[0].failure_reason == CELL_DISAPPEARED
    assert converge([], ActualSet(), [task("RUNNING", cell_id="c1")], cell(), 10.0, CONFIG).tasks_failed == []
    done = dataclasses.replace(task("COMPLETED", first_completed_at=100.0),
                               definition={"command": ["x"], "completion_callback_url": "https://cb.test/done"})
    assert converge([], ActualSet(), [done], {}, 219.0, CONFIG).task_deletes == []
    assert converge([], ActualSet(), [done], {}, 220.0, CONFIG).task_deletes == [done]


def test_long_gone_cells_are_forgotten() -> None:
    out = converge([], ActualSet(), [], cell(expires_at=0.0, disappeared=True), 3600.0, CONFIG)
    assert [c.cell_id for c in out.cells_forgotten] == ["c1"] and out.cells_disappeared == []


def test_decisions_about_rows_changed_since_the_snapshot_are_dropped() -> None:
    from bbs.convergence import drop_stale, touched_indices

    stale = unclaimed("web", 0, "d", 0.0)
    other = unclaimed("web", 1, "d", 0.0)
    actuals = ActualSet([stale, other])
    out = converge([desired(3)], actuals, [], {}, 100.0, CONFIG)
    changes = actuals.diff()
    assert touched_indices(changes, out) == {("web", 0), ("web", 1), ("web", 2)}
    claimed_meanwhile = dataclasses.replace(stale, state=CLAIMED, cell_id="c1", mod_index=1)
    kept = drop_stale(changes, out, [stale, other], [claimed_meanwhile, other], {"web"}, {}, {}, {})
    assert out.starts == {"web": {1, 2}}
    assert [r.index for r in kept.updates] == [1] and [r.index for r in kept.inserts] == [2]
    # A desired LRP deleted meanwhile gets no new instances.
    out = converge([desired(3)], ActualSet([stale, other]), [], {}, 100.0, CONFIG)
    assert drop_stale(ActualSet().diff(), out, [], [], set(), {}, {}, {}).inserts == [] and out.starts == {}


def test_suspect_of_a_returning_cell_that_lost_it_is_dropped() -> None:
    actuals = ActualSet([on_cell(0, presence=SUSPECT), unclaimed("web", 0, "d", 1.0)])
    cells = cell("c1", expires_at=100.0)
    converge([desired(1)], actuals, [], cells, 10.0, CONFIG, holdings={})  # holdings unknown: wait
    assert len(list(actuals)) == 2
    converge([desired(1)], actuals, [], cells, 10.0, CONFIG, holdings={"c1": set()})
    assert [(r.presence, r.state) for r in actuals] == [(ORDINARY, UNCLAIMED)]


# --- keep-replicas: what happens to instances on a lost cell (bbs/cell_loss.py) --------------------------

KEEP = ConvergenceConfig(cell_loss=CellLossConfig(grace=30.0, check=5.0))


def on(pg: str, index: int, cell_id: str = "c1", presence: str = ORDINARY) -> ActualRecord:
    return dataclasses.replace(on_cell(index, cell=cell_id, presence=presence), process_guid=pg,
                               instance_guid=f"{pg}-{index}")


def keep_apps() -> list[DesiredRecord]:
    return [desired(3, "trio", KEEP_REPLICAS), desired(1, "solo", KEEP_REPLICAS), desired(1, "diego")]


def test_keep_replicas_instances_of_a_lost_cell_stay_suspect_without_replacements_through_the_grace() -> None:
    # c1 expired at 100; trio's index 0, solo and diego's one instance ran there, trio's others on c2.
    actuals = ActualSet([on("trio", 0), on("trio", 1, "c2"), on("trio", 2, "c2"), on("solo", 0),
                         on("diego", 0)])
    cells = {**cell("c1", expires_at=100.0), **cell("c2", expires_at=1000.0)}
    out = converge(keep_apps(), actuals, [], cells, 110.0, KEEP)
    assert out.starts == {"diego": {0}}  # Diego's policy: a replacement at once
    assert sorted((r.process_guid, r.index, r.state) for r in actuals if r.presence == SUSPECT) == [
        ("diego", 0, RUNNING), ("solo", 0, RUNNING), ("trio", 0, RUNNING)]  # counted as running suspects
    assert actuals.get("trio", 0) is None and actuals.get("solo", 0) is None  # no replacement
    assert out.next_restart_at == 130.0 and out.probe_cells == set()  # a pass is due when the grace ends

    # Passes during the grace change nothing: no replacement for the kept indices (not "missing").
    again = converge(keep_apps(), actuals, [], cells, 120.0, KEEP)
    assert again.starts == {} and actuals.get("trio", 0) is None and actuals.get("solo", 0) is None


def keep_after_expiry() -> tuple[ActualSet, dict[str, CellRecord]]:
    actuals = ActualSet([on("trio", 0, presence=SUSPECT), on("trio", 1, "c2"), on("trio", 2, "c2"),
                         on("solo", 0, presence=SUSPECT)])
    return actuals, {**cell("c1", expires_at=100.0), **cell("c2", expires_at=1000.0)}


def test_after_the_grace_the_cell_is_checked_and_only_single_instance_apps_move_if_it_is_down() -> None:
    actuals, cells = keep_after_expiry()
    out = converge(keep_apps()[:2], actuals, [], cells, 130.0, KEEP)
    assert out.starts == {} and out.probe_cells == {"c1"}  # the check
    answered = converge(keep_apps()[:2], actuals, [], cells, 131.0, KEEP,
                        probes={"c1": Probe(130.0, frozenset())})
    assert answered.starts == {} and answered.probe_cells == set()  # its rep answers: not lost
    down = converge(keep_apps()[:2], actuals, [], cells, 135.0, KEEP, probes={"c1": Probe(130.5, None)})
    assert down.starts == {"solo": {0}}  # lost: the single instance is replaced ...
    assert actuals.get("solo", 0).state == UNCLAIMED and actuals.other("solo", 0).presence == SUSPECT
    assert actuals.get("trio", 0) is None  # ... the several-replica app's stays, SUSPECT, unreplaced
    later = converge(keep_apps()[:2], actuals, [], cells, 160.0, KEEP, probes={"c1": Probe(130.5, None)})
    assert later.starts == {} and actuals.get("trio", 0) is None


def test_a_lost_cell_that_returns_keeps_its_instances() -> None:
    actuals, cells = keep_after_expiry()
    back = {**cell("c1", expires_at=200.0), **cell("c2", expires_at=1000.0)}
    out = converge(keep_apps()[:2], actuals, [], back, 150.0, KEEP, holdings={"c1": {"trio-0", "solo-0"}})
    assert out.starts == {} and out.stops == []
    assert sorted((r.process_guid, r.index, r.presence) for r in actuals if r.cell_id == "c1") == [
        ("solo", 0, ORDINARY), ("trio", 0, ORDINARY)]


def test_a_removed_cell_or_a_policy_changed_to_reschedule_replaces_the_kept_suspects() -> None:
    actuals, cells = keep_after_expiry()
    out = converge(keep_apps()[:2], actuals, [], {"c2": cells["c2"]}, 110.0, KEEP)  # c1's row is gone
    assert out.starts == {"trio": {0}, "solo": {0}}
    actuals, cells = keep_after_expiry()
    out = converge([desired(3, "trio"), desired(1, "solo")], actuals, [], cells, 110.0, KEEP)
    assert out.starts == {"trio": {0}, "solo": {0}}


# --- late claims: work a present cell accepted is not auctioned again (bbs/placements.py) ------------------


def placed(cell_id: str = "c1", placed_at: float = 2.0, lrps: str = "web:0", tasks: str = "") -> PlacementLog:
    log = PlacementLog()
    log.add([(1, placed_at, {cell_id: {"lrps": lrps, "tasks": tasks}})])
    return log


def test_a_stale_instance_a_present_cell_accepted_is_not_auctioned_again() -> None:
    actuals = ActualSet([unclaimed("web", 0, "d", 1.0)])  # auctioned at 1, placed on c1 at 2, stale at 31
    cells = cell("c1", expires_at=1000.0)
    out = converge([desired(1)], actuals, [], cells, 40.0, CONFIG, placements=placed())
    assert out.starts == {} and out.probe_cells == {"c1"} and not actuals.diff()
    holds = {"c1": Probe(35.0, frozenset({("web", 0)}))}
    assert converge([desired(1)], actuals, [], cells, 40.0, CONFIG, holds, placements=placed()).starts == {}
    silent = {"c1": Probe(35.0, None)}  # a stalled rep, still present: wait for it
    out = converge([desired(1)], actuals, [], cells, 40.0, CONFIG, probes=silent, placements=placed())
    assert out.starts == {}
    lost = {"c1": Probe(35.0, frozenset())}  # it answers without it: auctioned again
    out = converge([desired(1)], actuals, [], cells, 40.0, CONFIG, probes=lost, placements=placed())
    assert out.starts == {"web": {0}}


def test_a_late_claim_is_not_awaited_from_a_cell_that_is_gone_or_for_an_older_auction() -> None:
    cells = cell("c1", expires_at=20.0)  # expired before the instance went stale
    out = converge([desired(1)], ActualSet([unclaimed("web", 0, "d", 1.0)]), [], cells, 40.0, CONFIG,
                   placements=placed())
    assert out.starts == {"web": {0}}
    present = cell("c1", expires_at=1000.0)
    auctioned_again = ActualSet([unclaimed("web", 0, "d", 5.0)])  # after the placement of 2: that one is over
    out = converge([desired(1)], auctioned_again, [], present, 40.0, CONFIG, placements=placed())
    assert out.starts == {"web": {0}}


def test_a_task_a_present_cell_accepted_is_not_kicked_again() -> None:
    cells = cell("c1", expires_at=1000.0)
    log = placed(lrps="", tasks="t")
    pending = task(auctioned_at=1.0)
    assert converge([], ActualSet(), [pending], cells, 40.0, CONFIG, placements=log).tasks_to_kick == []
    lost = {"c1": Probe(35.0, frozenset(), frozenset())}
    out = converge([], ActualSet(), [pending], cells, 40.0, CONFIG, probes=lost, placements=log)
    assert [t.task_guid for t in out.tasks_to_kick] == ["t"]


@settings(max_examples=300, deadline=None)
@given(
    instances=st.lists(st.integers(0, 4), min_size=1, max_size=2),
    keep=st.lists(st.booleans(), min_size=2, max_size=2),
    rows=st.lists(
        st.tuples(
            st.integers(0, 1),  # app
            st.integers(0, 3),  # index (few, so presences of one index meet often)
            st.sampled_from([UNCLAIMED, CLAIMED, RUNNING, CRASHED]),
            st.sampled_from([ORDINARY, ORDINARY, ORDINARY, SUSPECT, EVACUATING]),
            st.sampled_from(["c1", "c2", "gone"]),
            st.sampled_from([0.0, 19.0, 20.0, 45.0]),  # since / last auction: stale at now 50 up to 20
        ),
        max_size=30,
    ),
)
def test_setting_settled_instances_aside_decides_the_same(
    instances: list[int], keep: list[bool], rows: list[tuple[int, int, str, str, str, float]]
) -> None:
    apps = [desired(n, pg=f"app-{i}", on_cell_loss=KEEP_REPLICAS if keep[i] else "reschedule")
            for i, n in enumerate(instances)]
    unique: dict[tuple[str, int, str], ActualRecord] = {}
    for app, index, state, presence, cell_id, since in rows:
        row = dataclasses.replace(
            unclaimed(f"app-{app}", index, "d", since),
            state=state,
            presence=presence,
            cell_id="" if state == UNCLAIMED else cell_id,
            instance_guid=f"i-{app}-{index}-{presence}",
        )
        unique[row.key] = row
    cells = {**cell("c1"), **cell("c2"), **cell("gone", expires_at=5.0)}
    now = 50.0

    whole = ActualSet(unique.values())
    expected = converge(apps, whole, [], cells, now, CONFIG)
    settled, rest = settle(apps, list(unique.values()), cells, now, CONFIG)
    part = ActualSet(rest)
    seen = converge(apps, part, [], cells, now, CONFIG, settled=settled)

    def outcome(actions, actual_set: ActualSet):  # new records carry fresh epochs: compare the rest
        changes = actual_set.diff()
        return (
            actions.starts,
            sorted(actions.stops, key=lambda s: (s.process_guid, s.index, s.instance_guid)),
            sorted((r.key, r.state, r.cell_id) for r in changes.deletes),
            sorted((r.key, r.state, r.cell_id, r.mod_index) for r in changes.updates),
            sorted((r.key, r.state, r.cell_id) for r in changes.inserts),
        )

    assert outcome(seen, part) == outcome(expected, whole)
    assert sum(settled.states.values()) + len(rest) == len(unique)


def test_fresh_instances_are_what_unclaimed_makes_for_each_index() -> None:
    apps = [desired(3, pg="web"), desired(0, pg="none"), desired(2, pg="api")]
    made = fresh_instances(apps, 12.5)
    expected = [unclaimed(d.process_guid, i, d.domain, 12.5) for d in apps for i in range(d.instances)]
    assert [dataclasses.replace(r, mod_epoch="") for r in made] == [
        dataclasses.replace(r, mod_epoch="") for r in expected
    ]
    assert len({r.mod_epoch for r in made}) == len(made)  # each its own epoch
    made[0].ports.append({"container_port": 1, "host_port": 2})
    assert made[1].ports == []  # no shared list


def test_unclaimed_auctioned_before_the_in_flight_mark_is_auctioned_at_once() -> None:
    """A BBS that took over, a new auctioneer or a rebooted cell: nothing auctioned earlier is known to be in
    flight, so it is auctioned again now, not once stale; what was auctioned since waits as ever."""
    before, since = unclaimed("web", 0, "d", 1.0), unclaimed("web", 1, "d", 6.0)
    marked = dataclasses.replace(CONFIG, in_flight_since=5.0)
    settled, rest = settle([desired(2)], [before, since], {}, 7.0, marked)
    assert rest == [before] and settled.holds("web", 1)
    out = converge([desired(2)], ActualSet(rest), [], {}, 7.0, marked, settled=settled)
    assert out.starts == {"web": {0}}
    settled, rest = settle([desired(2)], [before, since], {}, 7.0, CONFIG)
    assert rest == []
    assert converge([desired(2)], ActualSet(rest), [], {}, 7.0, CONFIG, settled=settled).starts == {}


def test_past_the_in_flight_mark_a_present_cell_that_accepted_it_is_asked_first() -> None:
    actuals = ActualSet([unclaimed("web", 0, "d", 1.0)])  # auctioned at 1, placed on c1 at 2
    marked = dataclasses.replace(CONFIG, in_flight_since=5.0)
    out = converge([desired(1)], actuals, [], cell("c1"), 6.0, marked, placements=placed())
    assert out.starts == {} and out.probe_cells == {"c1"}
    lost = {"c1": Probe(5.5, frozenset())}  # the rebooted rep answers without it
    out = converge([desired(1)], actuals, [], cell("c1"), 6.0, marked, probes=lost, placements=placed())
    assert out.starts == {"web": {0}}


def test_unplaced_instances_are_auctioned_at_once_when_a_cell_appears() -> None:
    """An auction that found no room left a placement error: not in flight. Once a cell appears it may fit."""
    failed = dataclasses.replace(unclaimed("web", 0, "d", 1.0), placement_error="found no compatible cell")
    waiting = unclaimed("web", 1, "d", 1.0)  # no error: its auction may still be under way
    appeared = dataclasses.replace(CONFIG, cell_appeared_at=5.0)
    settled, rest = settle([desired(2)], [failed, waiting], {}, 6.0, appeared)
    assert rest == [failed] and settled.holds("web", 1)
    out = converge([desired(2)], ActualSet(rest), [], {}, 6.0, appeared, settled=settled)
    assert out.starts == {"web": {0}}
    assert settle([desired(2)], [failed, waiting], {}, 6.0, CONFIG)[1] == []
