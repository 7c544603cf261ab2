"""End to end: cell states served by the BBS (`vendue cells` never asks a rep), and an operator's cordon,
uncordon and drain of a cell (make-before-break, the rep left running), on both transports."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter

import httpx
import pytest

from common.tls import CA_CERT, TLSFiles, client_context

from .conftest import (
    E2ECluster,
    Unmet,
    all_running,
    brief,
    expect,
    hold_for,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e]

# A cluster's first start request can reach it just before its auctioneer holds the lease (on NATS: no
# responder yet); the BBS sends it again after --stale-unclaimed (30 s). Later ones find it elected.
FIRST_PLACEMENT_S = 60.0


def cell_states(c: E2ECluster, *extra: str) -> dict[str, dict]:
    """`vendue cells --json` (the BBS's cell states), by cell id."""
    listed = c.cli("cells", "--json", *extra)
    assert listed.code == 0, f"expected `vendue cells --json` to succeed, saw {listed.code}: {listed.output}"
    return {cell["cell_id"]: cell for cell in json.loads(listed.stdout)}


def cells_on(c: E2ECluster, guid: str) -> Counter[str]:
    return Counter(a["cell_id"] for a in c.bbs.actuals(guid) if a["cell_id"])


def cli_ok(c: E2ECluster, *args: str, timeout: float = 30.0) -> str:
    result = c.cli(*args, timeout=timeout)
    assert result.code == 0, (
        f"expected `vendue {' '.join(args)}` to succeed, saw {result.code}: {result.output}"
    )
    return result.stdout


@pytest.mark.timeout(150)
def test_cells_json_is_what_each_rep_reports_and_needs_no_rep(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    guid = c.guid("sized")
    c.bbs.desire(guid, 3, memory_mb=200, disk_mb=100)
    wait_all_running(c.bbs, guid, 3, timeout=FIRST_PLACEMENT_S)

    def same_as_the_reps() -> dict[str, dict]:
        listed = cell_states(c)
        for cell_id in c.reps:
            own = c.rep_state(cell_id)  # what the rep itself says it has left and holds
            cell = listed[cell_id]
            theirs = (own["bid"]["available"], len(own["lrps"]))
            ours = (cell["available"], cell["instances"])
            if ours != theirs:
                raise Unmet(f"{cell_id}: the BBS says {ours}, its rep {theirs}")
            if cell["total"] != own["bid"]["total"] or cell["state"] != "present" or cell["cordoned"]:
                raise Unmet(f"{cell_id}: {cell}")
        return listed

    listed = wait_for(
        same_as_the_reps, 20.0, "every cell's capacity in `vendue cells --json` equal to its rep's"
    )
    assert sum(cell["instances"] for cell in listed.values()) == 3, listed
    assert sum(4096 - cell["available"]["memory_mb"] for cell in listed.values()) == 600, listed

    # A rep that answers nothing (stopped, continued only once the listing is done): the listing answers
    # all the same, from the BBS alone; asking that rep it would wait for ever (run_cli bounds the wait).
    stopped = next(cell_id for cell_id, cell in listed.items() if cell["instances"])
    c.lc.kill(stopped, signal.SIGSTOP)
    try:
        during = cell_states(c, "--all")  # --all: its presence may expire while it is stopped
        table = cli_ok(c, "cells", "--all")
    finally:
        c.lc.kill(stopped, signal.SIGCONT)
    assert during[stopped]["available"] == listed[stopped]["available"], (listed[stopped], during[stopped])
    row = next(line for line in table.splitlines() if stopped in line)
    memory = listed[stopped]["available"]["memory_mb"]
    assert f"{memory} / 4096 MB" in row and "unreachable" not in table, table


@pytest.mark.timeout(150)
def test_a_cordoned_cell_gets_no_new_work_and_uncordon_makes_it_eligible(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    cordoned, other = sorted(c.reps)
    kept = c.guid("kept")
    c.bbs.desire(kept, 2)
    before = wait_all_running(c.bbs, kept, 2, timeout=FIRST_PLACEMENT_S)
    assert "CORDONED" in cli_ok(c, "cells", "cordon", cordoned)
    assert cell_states(c)[cordoned]["cordoned"] is True
    # The BBS tells the rep (which then refuses work an earlier auction might still send).
    wait_for(lambda: c.rep_state(cordoned)["bid"]["cordoned"], 5.0,
             f"the rep of {cordoned} told it is cordoned")

    fresh = c.guid("fresh")
    c.bbs.desire(fresh, 4)
    wait_all_running(c.bbs, fresh, 4)
    assert cells_on(c, fresh) == {other: 4}, (
        f"expected every instance on {other}, saw {brief(c.bbs.actuals(fresh))}"
    )
    # What ran there keeps running (the same instances).
    now = all_running(c.bbs, kept, 2)
    assert {i: a["instance_guid"] for i, a in now.items()} == {
        i: a["instance_guid"] for i, a in before.items()
    }

    assert "present" in cli_ok(c, "cells", "uncordon", cordoned)
    wait_for(
        lambda: not c.rep_state(cordoned)["bid"]["cordoned"], 5.0,
        f"the rep of {cordoned} told it is uncordoned",
    )
    c.bbs.scale(fresh, 8)
    wait_for(lambda: expect(cells_on(c, fresh)[cordoned] > 0, brief(c.bbs.actuals(fresh))), 30.0,
             f"an instance of {fresh} placed on {cordoned} once uncordoned")


@pytest.mark.timeout(180)
def test_drain_wait_moves_every_instance_make_before_break_and_keeps_the_rep(make_cluster) -> None:
    c = make_cluster(cells=3, zones=1)
    guid = c.guid("moved")
    c.bbs.desire(guid, 4)
    running = wait_all_running(c.bbs, guid, 4, timeout=FIRST_PLACEMENT_S)
    victim = Counter(a["cell_id"] for a in running.values()).most_common(1)[0][0]
    moved = {i for i, a in running.items() if a["cell_id"] == victim}

    # The BBS's view, read fast: an index being moved never lacks a RUNNING instance.
    gaps: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        with c.lc.http_client(base_url=c.lc.bbs_url, timeout=5.0) as http:
            while not stop.is_set():
                try:
                    actuals = http.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
                except (httpx.HTTPError, ValueError, KeyError):
                    continue
                gaps.extend(f"index {i} had no RUNNING instance: {brief(actuals)}" for i in moved
                            if not any(a["index"] == i and a["state"] == "RUNNING" for a in actuals))
                stop.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        drained = c.cli("cells", "drain", victim, "--wait", "--timeout", "60", timeout=90.0)
    finally:
        stop.set()
        watcher.join(10.0)
    assert drained.code == 0 and f"drained {victim}" in drained.stdout, drained.output
    assert not gaps, gaps[:3]
    assert c.bbs.actuals(cell_id=victim) == [], brief(c.bbs.actuals(cell_id=victim))
    now = all_running(c.bbs, guid, 4)
    assert all(a["cell_id"] != victim for a in now.values()), brief(c.bbs.actuals(guid))
    assert c.lc.is_running(victim), f"expected the drained cell's rep {victim} to keep running"
    state = cell_states(c)[victim]
    assert (state["cordoned"], state["draining"], state["instances"]) == (True, True, 0), state

    # uncordon: eligible again.
    cli_ok(c, "cells", "uncordon", victim)
    assert cell_states(c)[victim]["cordoned"] is False
    c.bbs.scale(guid, 9)
    wait_for(lambda: expect(cells_on(c, guid)[victim] > 0, brief(c.bbs.actuals(guid))), 30.0,
             f"an instance placed on {victim} once uncordoned")


@pytest.mark.timeout(150)
def test_a_drain_with_no_room_elsewhere_leaves_the_instance_running_and_says_why(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    guid = c.guid("big")
    c.bbs.desire(guid, 2, memory_mb=3000)  # one per cell (4096 MB each): neither has room for another
    running = wait_all_running(c.bbs, guid, 2, timeout=FIRST_PLACEMENT_S)
    victim = running[0]["cell_id"]
    stuck = c.cli("cells", "drain", victim, "--wait", "--timeout", "6", timeout=60.0)
    assert stuck.code == 1, f"expected exit 1 at the timeout, saw {stuck.code}: {stuck.output}"
    assert f"{victim} still holds 1" in stuck.stderr and f"{guid}/0" in stuck.stderr, stuck.stderr
    assert "insufficient resources" in stuck.stderr, f"expected the placement error, saw {stuck.stderr}"
    [old] = [a for a in c.bbs.actuals(guid) if a["cell_id"] == victim]
    assert (old["instance_guid"], old["state"]) == (running[0]["instance_guid"], "RUNNING"), old
    # uncordon ends the drain: the instance is the index's own again, its unplaced replacement dropped.
    cli_ok(c, "cells", "uncordon", victim)
    wait_for(lambda: expect(sorted((a["index"], a["presence"], a["state"]) for a in c.bbs.actuals(guid))
                            == [(0, "ORDINARY", "RUNNING"), (1, "ORDINARY", "RUNNING")],
                            brief(c.bbs.actuals(guid))), 10.0, "both instances ORDINARY and RUNNING")
    assert all_running(c.bbs, guid, 2)[0]["instance_guid"] == running[0]["instance_guid"]


@pytest.mark.timeout(180)
def test_a_cordon_survives_a_bbs_restart_and_a_rep_restart(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    cordoned, other = sorted(c.reps)
    cli_ok(c, "cells", "cordon", cordoned)
    boot = cell_states(c)[cordoned]["boot_id"]
    c.lc.restart("bbs")
    c.lc.restart(cordoned)
    wait_for(lambda: expect(cell_states(c).get(cordoned, {}).get("boot_id") not in (None, boot),
                            cell_states(c).get(cordoned)), 30.0, f"{cordoned} present again with a new boot")
    assert cell_states(c)[cordoned]["cordoned"] is True
    wait_for(
        lambda: c.rep_state(cordoned)["bid"]["cordoned"],
        10.0,
        f"the restarted rep of {cordoned} told it is cordoned",
    )
    guid = c.guid("after")
    c.bbs.desire(guid, 3)
    wait_all_running(c.bbs, guid, 3)
    hold_for(lambda: expect(set(cells_on(c, guid)) == {other}, brief(c.bbs.actuals(guid))), 1.0,
             f"every instance on {other}, none on the cordoned {cordoned}")


@pytest.mark.timeout(120)
def test_only_an_admin_cordons_uncordons_or_drains(make_cluster) -> None:
    c = make_cluster(cells=2, zones=1)
    reader = c.lc.issue_certificate("reader", "cells-reader")
    rep = TLSFiles.in_dir(c.lc.certs_dir, "cell-0")  # a genuine rep certificate, for its own cell
    for role, files in (("reader", reader), ("rep", rep)):
        verify = client_context(files, ca=c.lc.certs_dir / CA_CERT)
        with httpx.Client(base_url=c.lc.bbs_url, verify=verify, timeout=10.0) as caller:
            for mode in ("cordon", "uncordon", "drain"):
                answer = caller.post(f"/v1/cells/cell-0/{mode}")
                assert answer.status_code == 403 and f"role {role}" in answer.json()["detail"], (
                    f"expected 403 for {mode} by {role}, saw {answer.status_code} {answer.text}")
    assert not any(cell["cordoned"] or cell["draining"] for cell in cell_states(c).values())
