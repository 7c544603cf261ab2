"""End to end: long-running processes on a real cluster (process executor, real child processes)."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter

import pytest

from .conftest import (
    APP_COMMAND,
    Unmet,
    actual_lrps_in,
    all_running,
    app_processes,
    ask_instance,
    brief,
    expect,
    hold_for,
    one_process_per_index,
    proc_alive,
    running_ordinary,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e]


def cell_ids(c) -> list[str]:
    return sorted(cell["cell_id"] for cell in c.bbs.cells())


@pytest.mark.timeout(120)
def test_push_spreads_instances_over_zones_and_cells(make_cluster):
    c = make_cluster(cells=4, zones=2)
    guid = c.guid("spread")

    r = c.cli("push", guid, "--instances", "6", "--memory", "128", "--disk", "128", "--", *APP_COMMAND)
    assert r.code == 0, f"expected `vendue push` to succeed, saw exit {r.code}: {r.output}"

    running = wait_all_running(c.bbs, guid, 6)
    zone_of = {cid: rep.zone for cid, rep in c.reps.items()}
    assert len(set(zone_of.values())) == 2, f"expected 4 cells in 2 zones, saw {zone_of}"
    per_zone = Counter(zone_of[a["cell_id"]] for a in running.values())
    per_cell = Counter(a["cell_id"] for a in running.values())
    assert sorted(per_zone.values()) == [3, 3], f"expected 3 instances per zone, saw {dict(per_zone)}"
    assert max(per_cell.values()) <= 2, f"expected at most 2 instances per cell, saw {dict(per_cell)}"
    for index, a in running.items():
        assert a["zone"] == zone_of[a["cell_id"]], f"index {index}: zone {a['zone']!r} is not its cell's"
        answer = ask_instance(a["address"])
        assert (answer.index, answer.cell_id) == (index, a["cell_id"]), (
            f"expected index {index} on {a['cell_id']} at {a['address']}, saw {answer}")
    one_process_per_index(guid, running)


@pytest.mark.timeout(120)
def test_killed_instance_is_reported_crashed_and_restarted_at_once(make_cluster):
    c = make_cluster(cells=2, zones=1)
    events = c.follow_events()
    guid = c.guid("crashy")
    c.bbs.desire(guid, 2)
    running = wait_all_running(c.bbs, guid, 2)

    victim = running[1]
    answer = ask_instance(victim["address"])
    held = {lrp["instance_guid"]: lrp for lrp in c.rep_state(victim["cell_id"])["lrps"]}
    assert victim["instance_guid"] in held, (
        f"expected the rep of {victim['cell_id']} to report instance {victim['instance_guid']}, saw "
        f"{list(held)}"
    )
    assert held[victim["instance_guid"]].get("pid") == answer.pid, (
        f"expected the rep's pid for index 1 to be {answer.pid} (the process answering), "
        f"saw {held[victim['instance_guid']].get('pid')}")

    os.kill(answer.pid, signal.SIGKILL)

    def crash_reported():
        # The crash as the BBS publishes it: a CRASHED record, or (Diego's immediate restart: crashes 1-2
        # go straight back to UNCLAIMED) the instance with its crash counted and the rep's reason.
        for ev in events.snapshot():
            for a in actual_lrps_in(ev.data):
                if a["process_guid"] == guid and a["index"] == 1 and (
                        a["state"] == "CRASHED" or "crash" in ev.type
                        or (a["crash_count"] == 1 and a["crash_reason"] and a["state"] != "RUNNING")):
                    return a
        raise Unmet(
            f"events so far: {[(e.type, actual_lrps_in(e.data)[:1]) for e in events.snapshot()][-6:]}"
        )

    crashed = wait_for(crash_reported, 10.0, "an event reporting index 1's crash")
    assert crashed["crash_count"] == 1 and crashed["crash_reason"], (
        f"expected the crash counted with the rep's reason, saw {crashed}")

    def restarted():
        actuals = c.bbs.actuals(guid)
        now = running_ordinary(actuals)
        one = now.get(1)
        if one is None or one["crash_count"] != 1:
            raise Unmet(brief(actuals))
        got = ask_instance(one["address"])
        if got.index != 1 or got.pid == answer.pid:
            raise Unmet(f"index 1 at {one['address']} answered {got}")
        return one

    # Crashes 1-2 restart at once: well inside the 30 s back-off that would follow a third crash.
    one = wait_for(restarted, 15.0, "index 1 RUNNING again with crash_count 1 and a new process")
    assert not proc_alive(answer.pid), f"expected the killed process {answer.pid} to be gone"
    assert one["crash_count"] == 1
    zero = running_ordinary(c.bbs.actuals(guid))[0]
    assert (zero["instance_guid"], zero["crash_count"]) == (running[0]["instance_guid"], 0), (
        f"expected index 0 untouched, saw {zero}")
    one_process_per_index(guid, wait_all_running(c.bbs, guid, 2))


@pytest.mark.timeout(180)
def test_killed_rep_instances_move_and_run_once_after_it_returns(make_cluster):
    c = make_cluster(cells=4, zones=2)
    events = c.follow_events()
    guid = c.guid("survivor")
    c.bbs.desire(guid, 4)
    running = wait_all_running(c.bbs, guid, 4)
    per_cell = Counter(a["cell_id"] for a in running.values())
    victim = per_cell.most_common(1)[0][0]
    moved = sorted(i for i, a in running.items() if a["cell_id"] == victim)
    before = app_processes(guid)
    victim_pids = [pid for i in moved for pid in before.get(i, [])]
    assert len(victim_pids) == len(moved), f"expected one process per index {moved}, saw {before}"

    c.lc.kill(victim, signal.SIGKILL)

    # PR_SET_PDEATHSIG: the rep's children die with it.
    wait_for(lambda: expect(not [p for p in victim_pids if proc_alive(p)],
                            f"alive: {[p for p in victim_pids if proc_alive(p)]}"), 5.0,
        f"the instance processes {victim_pids} of killed {victim} to die with it")
    wait_for(lambda: expect(victim not in cell_ids(c), f"cells {cell_ids(c)}"), 15.0,
             f"{victim}'s presence to expire")

    def moved_elsewhere():
        actuals = c.bbs.actuals(guid)
        now = running_ordinary(actuals)
        for i in moved:
            if i not in now or now[i]["cell_id"] == victim:
                raise Unmet(brief(actuals))
            got = ask_instance(now[i]["address"])
            if got.index != i:
                raise Unmet(f"index {i} at {now[i]['address']} answered {got}")
        return now

    wait_for(moved_elsewhere, 30.0, f"indices {moved} RUNNING on cells other than {victim}")
    suspected = {a["index"] for ev in events.snapshot() for a in actual_lrps_in(ev.data)
                 if a["process_guid"] == guid and a["presence"] == "SUSPECT" and a["cell_id"] == victim}
    assert suspected == set(moved), (
        f"expected the BBS to mark indices {moved} on the expired {victim} SUSPECT, saw {sorted(suspected)}")

    c.lc.restart(victim)
    wait_for(lambda: expect(victim in cell_ids(c), f"cells {cell_ids(c)}"), 15.0, f"{victim} present again")

    def converged():
        now = all_running(c.bbs, guid, 4)
        one_process_per_index(guid, now)
        return {i: a["instance_guid"] for i, a in now.items()}

    settled = wait_for(converged, 30.0, "every index RUNNING exactly once (one actual, one process)")
    hold_for(lambda: converged() == settled, 3.0,
             "the same single instance per index after convergence (no duplicate, no churn)")
    for pid in victim_pids:
        assert not proc_alive(pid), f"expected the old instance process {pid} to stay gone"


@pytest.mark.timeout(150)
def test_scale_down_stops_extra_indices_and_scale_up_starts_new_ones(make_cluster):
    c = make_cluster(cells=4, zones=2)
    guid = c.guid("scaled")
    c.bbs.desire(guid, 6)
    running = wait_all_running(c.bbs, guid, 6)
    pids = {i: pids[0] for i, pids in app_processes(guid).items()}
    assert sorted(pids) == list(range(6)), f"expected one process per index 0..5, saw {pids}"

    r = c.cli("scale", guid, "--instances", "2")
    assert r.code == 0, f"expected `vendue scale {guid} 2` to succeed, saw exit {r.code}: {r.output}"
    now = wait_all_running(c.bbs, guid, 2)
    extra = [pids[i] for i in range(2, 6)]
    wait_for(lambda: expect(not [p for p in extra if proc_alive(p)],
                            f"still alive: {[p for p in extra if proc_alive(p)]}"), 15.0,
        f"the processes of indices 2..5 ({extra}) to exit")
    for i in (0, 1):
        assert now[i]["instance_guid"] == running[i]["instance_guid"], f"index {i} was replaced: {now[i]}"
        assert proc_alive(pids[i]), f"index {i}'s process {pids[i]} should still run"
    one_process_per_index(guid, now)

    r = c.cli("scale", guid, "--instances", "5")
    assert r.code == 0, f"expected `vendue scale {guid} 5` to succeed, saw exit {r.code}: {r.output}"
    now = wait_all_running(c.bbs, guid, 5)
    one_process_per_index(guid, now)
    for i in (0, 1):
        assert now[i]["instance_guid"] == running[i]["instance_guid"], f"index {i} was replaced: {now[i]}"
    fresh = {i: app_processes(guid)[i][0] for i in range(2, 5)}
    assert not set(fresh.values()) & set(extra), f"expected new processes for 2..4, saw {fresh} (old {extra})"


@pytest.mark.timeout(120)
def test_app_too_big_for_every_cell_stays_unclaimed_with_placement_error(make_cluster):
    c = make_cluster(cells=4, zones=2, cell_memory_mb=4096)
    guid = c.guid("whale")
    r = c.cli("push", guid, "--instances", "2", "--memory", "100000", "--disk", "128", "--", *APP_COMMAND)
    assert r.code == 0, (
        f"expected `vendue push` to accept a valid (if unplaceable) app, saw {r.code}: {r.output}"
    )

    def failed_placement():
        actuals = c.bbs.actuals(guid)
        if len(actuals) != 2 or any(a["state"] != "UNCLAIMED" or not a["placement_error"] for a in actuals):
            raise Unmet(brief(actuals))
        return actuals

    actuals = wait_for(failed_placement, 20.0, "2 UNCLAIMED actuals with a placement_error")
    for a in actuals:
        err = a["placement_error"]
        assert err.startswith("insufficient resources: memory"), f"expected Diego's error first, saw {err!r}"
        assert "0/4 cells fit" in err and "insufficient memory" in err, f"expected the breakdown, saw {err!r}"
        assert "need 100000" in err, f"expected the breakdown to say what was needed, saw {err!r}"

    hold_for(lambda: failed_placement(), 2.0, "the app staying UNCLAIMED with its placement error")
    assert not app_processes(guid), "no process may have started for an unplaceable app"

    r = c.cli("instances", guid)
    assert r.code == 0, f"expected `vendue instances {guid}` to succeed, saw {r.code}: {r.output}"
    assert "UNCLAIMED" in r.stdout, f"expected the state in `vendue instances`, saw:\n{r.stdout}"
    assert "insufficient resources: memory" in r.stdout, (
        f"expected the error in the listing, saw:\n{r.stdout}"
    )
    assert "0/4 cells fit" in r.stdout, f"expected the breakdown in the listing, saw:\n{r.stdout}"

    r = c.cli("instances", guid, "--json")
    assert r.code == 0, f"expected `vendue instances {guid} --json` to succeed, saw {r.code}: {r.output}"
    listed = json.loads(r.stdout)
    items = listed["items"] if isinstance(listed, dict) else listed
    assert sorted(a["index"] for a in items) == [0, 1], f"expected indices 0 and 1, saw {items}"
    for a in items:
        assert a["state"] == "UNCLAIMED", a
        assert "insufficient resources: memory" in a["placement_error"], a
        assert "0/4 cells fit" in a["placement_error"], a


@pytest.mark.timeout(150)
def test_third_crash_waits_in_crashed_for_its_backoff(make_cluster):
    c = make_cluster(cells=1, zones=1, bbs_args=["--crash-backoff-min", "30"])
    guid = c.guid("crashloop")
    c.bbs.desire(guid, 1)
    instance = wait_all_running(c.bbs, guid, 1)[0]
    assert instance["crash_count"] == 0, instance

    # Crashes 1 and 2 restart at once (a new process each time) ...
    for crash in (1, 2):
        pid = ask_instance(instance["address"]).pid
        os.kill(pid, signal.SIGKILL)

        def restarted(n: int = crash, old: int = pid) -> dict:
            a = all_running(c.bbs, guid, 1)[0]
            expect(a["crash_count"] == n and ask_instance(a["address"]).pid != old, brief([a]))
            return a

        instance = wait_for(restarted, 15.0, f"crash {crash} restarted at once with crash_count {crash}")

    # ... the third is reported CRASHED and waits out its back-off.
    os.kill(ask_instance(instance["address"]).pid, signal.SIGKILL)

    def crashed():
        actuals = c.bbs.actuals(guid)
        return expect(
            len(actuals) == 1
            and actuals[0]["state"] == "CRASHED"
            and actuals[0]["crash_count"] == 3
            and actuals[0]["crash_reason"],
            brief(actuals),
        )

    wait_for(crashed, 15.0, "the third crash reported as CRASHED with crash_count 3")
    hold_for(crashed, 3.0, "the instance staying CRASHED during its 30 s back-off")
    assert not app_processes(guid), f"expected no process while CRASHED, saw {app_processes(guid)}"


@pytest.mark.timeout(150)
def test_suspect_is_promoted_back_when_its_cell_returns_before_a_replacement_runs(make_cluster):
    # One cell: while it is silent there is nowhere to run a replacement.
    c = make_cluster(cells=1, zones=1)
    events = c.follow_events()
    guid = c.guid("steadfast")
    c.bbs.desire(guid, 2)
    running = wait_all_running(c.bbs, guid, 2)
    pids = app_processes(guid)
    rep = c.reps["cell-0"].proc
    os.kill(rep.pid, signal.SIGSTOP)  # the rep falls silent; its instances keep running
    try:
        def suspect():
            actuals = c.bbs.actuals(guid)
            sus = [a for a in actuals if a["presence"] == "SUSPECT"]
            return expect(len(sus) == 2 and all(a["state"] == "RUNNING" for a in sus), brief(actuals))

        wait_for(suspect, 15.0, "both instances SUSPECT once the silent cell's presence expired")
        for i, a in running.items():
            got = ask_instance(a["address"])
            assert got.index == i, f"a suspect instance must keep serving: index {i} answered {got}"
    finally:
        os.kill(rep.pid, signal.SIGCONT)

    def promoted():
        now = all_running(c.bbs, guid, 2)
        return expect({i: a["instance_guid"] for i, a in now.items()}
                      == {i: a["instance_guid"] for i, a in running.items()}, brief(c.bbs.actuals(guid)))

    wait_for(promoted, 20.0, "the same two instances RUNNING ORDINARY again, the replacements dropped")
    hold_for(promoted, 2.0, "the promoted instances staying put")
    assert app_processes(guid) == pids, f"expected the original processes {pids}, saw {app_processes(guid)}"
    promoted_events = [a for ev in events.snapshot() for a in actual_lrps_in(ev.data)
                       if a["process_guid"] == guid and a["presence"] == "SUSPECT"]
    assert promoted_events, "expected the SUSPECT marking on the event stream"
