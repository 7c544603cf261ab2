"""End to end: what happens to an app's instances when their cell is lost (`on_cell_loss`), and that work a
present cell accepted is never auctioned a second time, however late its claim reaches the BBS.

Real clusters on loopback (tests/e2e/conftest.py). A lost cell is a rep killed -9 (its instance processes die
with it: PR_SET_PDEATHSIG) or stalled with SIGSTOP (they keep running).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from datetime import datetime, timedelta

import httpx
import pytest

from .conftest import (
    E2ECluster,
    Unmet,
    all_running,
    app_processes,
    brief,
    expect,
    hold_for,
    one_process_per_index,
    running_ordinary,
    wait_all_running,
    wait_for,
)

GRACE_S = 3.0
CHECK_S = 1.0
# A keep-replicas cluster: a lost cell is checked 3 s after its presence expired, for up to 1 s.
KEEP_ARGS = ("--cell-loss-grace", str(GRACE_S), "--cell-loss-check", str(CHECK_S))


def cell_ids(c: E2ECluster) -> list[str]:
    return sorted(x["cell_id"] for x in c.bbs.cells())


def suspect_on(c: E2ECluster, guid: str, index: int, cell_id: str) -> dict:
    """The index's only actual: SUSPECT, still RUNNING, on `cell_id` (no replacement); else Unmet."""
    actuals = [a for a in c.bbs.actuals(guid) if a["index"] == index]
    if [(a["presence"], a["state"], a["cell_id"]) for a in actuals] != [("SUSPECT", "RUNNING", cell_id)]:
        raise Unmet(f"index {index}: {brief(actuals)}")
    return actuals[0]


def moved_off(c: E2ECluster, guid: str, index: int, cell_id: str) -> dict:
    """The index RUNNING ORDINARY on a cell other than `cell_id`; else Unmet."""
    actuals = c.bbs.actuals(guid)
    now = running_ordinary(actuals)
    if index not in now or now[index]["cell_id"] == cell_id:
        raise Unmet(brief(actuals))
    return now[index]


def lost_at_expiry(c: E2ECluster, cell_id: str) -> datetime:
    """When the BBS counts the (lost) cell's presence expired: its grace starts there."""
    listed = c.bbs.http.get("/v1/cells", params={"all": "true"})
    listed.raise_for_status()
    [cell] = [cell for cell in listed.json()["items"] if cell["cell_id"] == cell_id]
    return datetime.fromisoformat(cell["expires_at"])


def every_app_once(c: E2ECluster, apps: dict[str, int]) -> Callable[[], dict[str, dict[int, str]]]:
    """A check: every index of every app RUNNING exactly once (one actual, one process); their guids."""
    def check() -> dict[str, dict[int, str]]:
        seen = {}
        for guid, instances in apps.items():
            running = all_running(c.bbs, guid, instances)
            one_process_per_index(guid, running)
            seen[guid] = {i: a["instance_guid"] for i, a in running.items()}
        return seen
    return check


@pytest.mark.timeout(240)
def test_a_lost_cell_moves_single_instance_keep_replicas_apps_after_grace_and_check_and_keeps_the_rest(
    make_cluster,
):
    c = make_cluster(cells=3, zones=1, bbs_args=KEEP_ARGS)
    trio, solo, diego = c.guid("trio"), c.guid("solo"), c.guid("diego")
    c.bbs.desire(trio, 3, on_cell_loss="keep-replicas")
    c.bbs.desire(solo, 1, on_cell_loss="keep-replicas")
    c.bbs.desire(diego, 3)  # reschedule, Diego's: as before
    apps = {trio: 3, solo: 1, diego: 3}
    wait_for(every_app_once(c, apps), 60.0, "every app RUNNING, one process per index")
    # Three cells, three instances of trio and of diego: one of each on every cell. The victim: solo's cell.
    victim = running_ordinary(c.bbs.actuals(solo))[0]["cell_id"]
    held = {guid: next(i for i, a in running_ordinary(c.bbs.actuals(guid)).items() if a["cell_id"] == victim)
            for guid in (trio, diego)}

    c.lc.kill(victim, signal.SIGKILL)
    # Diego's policy: the instance is replaced as soon as the presence expired.
    wait_for(lambda: moved_off(c, diego, held[diego], victim), 30.0, f"{diego}'s index on {victim} replaced")
    # keep-replicas: SUSPECT (counted as running), nothing replaced during the grace.
    lost_at = wait_for(
        lambda: suspect_on(c, solo, 0, victim), 15.0, f"{solo} SUSPECT on the expired {victim}"
    )
    hold_for(lambda: suspect_on(c, solo, 0, victim) and suspect_on(c, trio, held[trio], victim), GRACE_S / 2,
             "the keep-replicas instances of the lost cell staying SUSPECT, unreplaced, during the grace")
    apps_view = c.cli("apps", "--json")
    assert apps_view.code == 0, apps_view.output
    running = {row["process_guid"]: row["running"] for row in json.loads(apps_view.stdout)}
    assert running[trio] == 3 and running[solo] == 1, f"suspects count as running, as in Diego: {running}"

    # After the grace and the check, the single-instance app moves; the three-instance app's stays put.
    moved = wait_for(lambda: moved_off(c, solo, 0, victim), 30.0, f"{solo} RUNNING on another cell")
    # By the BBS's own records: the replacement began only once the grace after the cell's loss was out.
    grace_ended = lost_at_expiry(c, victim) + timedelta(seconds=GRACE_S)
    assert datetime.fromisoformat(moved["since"]) >= grace_ended, (
        f"expected {solo} to wait out the {GRACE_S}s grace (to {grace_ended}), it ran from {moved['since']}"
    )
    assert lost_at["instance_guid"] != moved["instance_guid"]
    hold_for(lambda: suspect_on(c, trio, held[trio], victim), 2 * GRACE_S + CHECK_S,
             f"{trio}'s instance on the lost {victim} staying SUSPECT without a replacement")
    others = running_ordinary(c.bbs.actuals(trio))
    assert sorted(others) == sorted({0, 1, 2} - {held[trio]}), brief(c.bbs.actuals(trio))

    # The rep comes back (restarted: it lost its instances, and says so with a new boot id). The kept suspect
    # is dropped and its index placed afresh: every index runs exactly once.
    c.lc.restart(victim)
    settled = wait_for(every_app_once(c, apps), 60.0, "every index RUNNING exactly once after the restart")
    hold_for(lambda: every_app_once(c, apps)() == settled, 3.0, "no duplicate and no churn after the return")


@pytest.mark.timeout(180)
def test_a_cell_back_within_the_grace_keeps_its_keep_replicas_instances(make_cluster):
    c = make_cluster(cells=2, zones=1, bbs_args=("--cell-loss-grace", "60"))
    solo = c.guid("solo")
    c.bbs.desire(solo, 1, on_cell_loss="keep-replicas")
    [before] = wait_all_running(c.bbs, solo, 1).values()
    pids = app_processes(solo)
    rep = c.reps[before["cell_id"]].proc
    os.kill(rep.pid, signal.SIGSTOP)  # the rep falls silent; its instance keeps running
    try:
        wait_for(
            lambda: suspect_on(c, solo, 0, before["cell_id"]), 15.0, "the silent cell's instance SUSPECT"
        )
        hold_for(lambda: suspect_on(c, solo, 0, before["cell_id"]) and app_processes(solo) == pids, 2.0,
                 "no replacement while the grace lasts")
    finally:
        os.kill(rep.pid, signal.SIGCONT)

    def back() -> bool:
        now = all_running(c.bbs, solo, 1)
        return expect(now[0]["instance_guid"] == before["instance_guid"], brief(c.bbs.actuals(solo)))

    wait_for(back, 20.0, "the same instance RUNNING ORDINARY again once its cell heartbeats")
    hold_for(lambda: back() and app_processes(solo) == pids, 2.0, "the original process, and only it")


@pytest.mark.timeout(180)
def test_cells_remove_places_again_everything_a_dead_cell_held(make_cluster):
    c = make_cluster(cells=3, zones=1, bbs_args=("--cell-loss-grace", "600"))
    trio = c.guid("trio")
    c.bbs.desire(trio, 3, on_cell_loss="keep-replicas")
    running = wait_all_running(c.bbs, trio, 3)
    index, victim = next((i, a["cell_id"]) for i, a in running.items())
    refused = c.cli("cells", "remove", victim)
    assert refused.code == 1 and "is present" in refused.stderr, refused.output

    c.lc.kill(victim, signal.SIGKILL)
    wait_for(lambda: suspect_on(c, trio, index, victim), 15.0, f"index {index} SUSPECT on the dead {victim}")
    hold_for(lambda: suspect_on(c, trio, index, victim), 2.0, "no replacement (a 600 s grace)")
    removed = c.cli("cells", "remove", victim)
    assert removed.code == 0, removed.output
    wait_for(lambda: moved_off(c, trio, index, victim), 30.0, f"index {index} RUNNING on another cell")
    settled = wait_for(every_app_once(c, {trio: 3}), 30.0, "every index RUNNING exactly once")
    hold_for(lambda: every_app_once(c, {trio: 3})() == settled, 2.0, "no duplicate and no churn")
    assert victim not in cell_ids(c)
    again = c.cli("cells", "remove", victim)
    assert again.code == 1 and f"no cell named '{victim}'" in again.stderr, again.output


def auctioneer_stats(c: E2ECluster) -> dict:
    return httpx.get(f"{c.lc.auctioneer_url}/v1/stats", timeout=5.0, verify=c.lc.verify).json()


@pytest.mark.timeout(180)
def test_work_a_stalled_cell_accepted_is_not_auctioned_again_while_it_is_present(make_cluster):
    # The rep is stalled right after accepting the work: its claim, sent at once (an LRP starts only once
    # its claim is accepted), may or may not have left; the staleness limit is 2 s (1 s let a claim slowed by
    # a loaded machine come too late, so the instance was rightly placed again before the stall). The
    # presence TTL (12 s) outlasts the stall; the auctioneer gives up on a silent rep's bid after 1 s, so
    # without the guarantee a second auction would place the instance on the other cell within the stall,
    # UNCLAIMED or CLAIMED.
    c = make_cluster(cells=2, zones=1, bbs_args=("--stale-unclaimed", "2", "--presence-ttl", "12"),
                     rep_args=("--presence-ttl", "12", "--report-linger", "5"),
                     auctioneer_args=("--cell-state-timeout", "1"))
    late = c.guid("late")
    c.bbs.desire(late, 1)

    def accepted_by() -> str:
        # The rep holds the work before it answers the auctioneer, which counts the placement on that
        # answer: both, so that the hold below starts from the auction's end.
        placed = auctioneer_stats(c)["lrps_placed"]
        for cell_id in c.reps:
            if placed == 1 and any(lrp["process_guid"] == late for lrp in c.rep_state(cell_id)["lrps"]):
                return cell_id
        raise Unmet(f"no cell holds {late} yet, or not counted; stats {auctioneer_stats(c)}")

    # Looked at every 20 ms (not backing off): the stall must come before the rep gets further.
    holder = wait_for(accepted_by, 30.0, f"a cell to accept {late}", interval=0.02)
    rep = c.reps[holder].proc
    os.kill(rep.pid, signal.SIGSTOP)  # stalled right after accepting
    try:
        def held_by_the_stalled_cell_and_placed_once() -> bool:
            [actual] = c.bbs.actuals(late)
            stats = auctioneer_stats(c)
            # RUNNING too: a report the rep sent just before the stall may land during it.
            held = actual["state"] == "UNCLAIMED" or (actual["state"] in ("CLAIMED", "RUNNING") and
                                                      actual["cell_id"] == holder)
            return expect(
                held and stats["lrps_placed"] == 1 and holder in cell_ids(c),
                f"{brief([actual])}, placed {stats['lrps_placed']}, cells {cell_ids(c)}",
            )

        # Stalled for four times the staleness limit, present throughout: never placed a second time.
        hold_for(held_by_the_stalled_cell_and_placed_once, 8.0,
                 f"{late} UNCLAIMED, or CLAIMED or RUNNING by {holder}, placed once while it is stalled")
    finally:
        os.kill(rep.pid, signal.SIGCONT)

    running = wait_all_running(c.bbs, late, 1)
    assert running[0]["cell_id"] == holder, brief(c.bbs.actuals(late))

    def running_once_placed_once() -> bool:
        placed = auctioneer_stats(c)["lrps_placed"]
        return one_process_per_index(late, all_running(c.bbs, late, 1)) and expect(
            placed == 1, f"placed {placed} times: {brief(c.bbs.actuals(late))}")

    hold_for(running_once_placed_once, 3.0, f"{late} running once, placed once")
