"""End to end: the control plane dies under load and comes back (kill -9 of the BBS, of the auctioneer)."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from common.procutil import app_python

from .conftest import (
    Unmet,
    all_running,
    app_processes,
    ask_instance,
    brief,
    expect,
    hold_for,
    one_process_per_index,
    running_ordinary,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e]

# The killed auctioneer's lease outlives it; its successor (the restarted process) leads once the lease
# runs out. A short TTL (renewed every TTL/3) keeps that wait to seconds instead of the default 15 s.
AUCTIONEER_LEASE_TTL = ("--lease-ttl", "3")


def desired_state(c) -> list[tuple]:
    return sorted((d["process_guid"], d["instances"], tuple(d["command"]), d["memory_mb"],
                   d["modification_tag"]["epoch"], d["modification_tag"]["index"]) for d in c.bbs.desired())


def bbs_answers(c) -> bool:
    try:
        return c.bbs.http.get("/ping", timeout=1.0).status_code == 200
    except Exception as exc:  # noqa: BLE001 - reported as what was seen
        raise Unmet(f"BBS /ping: {exc!r}") from None


@pytest.mark.timeout(180)
def test_bbs_killed_and_restarted_on_the_same_file_keeps_state_and_converges(make_cluster):
    c = make_cluster(cells=3, zones=1)
    web, worker = c.guid("web"), c.guid("worker")
    c.bbs.desire(web, 3)
    c.bbs.desire(worker, 2)
    running = {web: wait_all_running(c.bbs, web, 3), worker: wait_all_running(c.bbs, worker, 2)}
    desired_before = desired_state(c)
    actual_before = {(a["process_guid"], a["index"]): (a["instance_guid"], a["cell_id"], a["address"])
                     for a in c.bbs.actuals()}
    pids_before = {g: app_processes(g) for g in running}

    c.lc.kill("bbs", signal.SIGKILL)
    # The apps keep running without the BBS.
    for guid, lrps in running.items():
        for index, a in lrps.items():
            got = ask_instance(a["address"])
            assert got.index == index, f"{guid}/{index} stopped answering while the BBS was down: {got}"

    c.lc.restart("bbs")
    wait_for(lambda: bbs_answers(c), 30.0, "the restarted BBS to answer /ping")

    desired_after = desired_state(c)
    assert desired_after == desired_before, f"desired state changed: {desired_before} -> {desired_after}"
    actual_after = {(a["process_guid"], a["index"]): (a["instance_guid"], a["cell_id"], a["address"])
                    for a in c.bbs.actuals()}
    assert actual_after == actual_before, f"actual state changed: {actual_before} -> {actual_after}"

    # The restarted BBS sees the cells again and leaves running instances alone.
    wait_for(lambda: expect(len(c.bbs.cells()) == 3, [x["cell_id"] for x in c.bbs.cells()]), 15.0,
             "all 3 cells present in the restarted BBS")

    def unchanged():
        actuals = c.bbs.actuals()
        now = {(a["process_guid"], a["index"]): (a["instance_guid"], a["cell_id"], a["address"])
               for a in actuals if a["state"] == "RUNNING" and a["presence"] == "ORDINARY"}
        if now != actual_before or len(actuals) != len(actual_before):
            raise Unmet(brief(actuals))
        return True

    hold_for(unchanged, 3.0, "the same instances RUNNING after the BBS restart (no churn)")
    assert {g: app_processes(g) for g in running} == pids_before, "instance processes were replaced"

    # Convergence carries on: a crash is restarted, a scale-up is placed.
    victim = ask_instance(running[web][2]["address"])
    os.kill(victim.pid, signal.SIGKILL)
    c.bbs.scale(worker, 4)

    def healed():
        now = all_running(c.bbs, web, 3)
        if now[2]["crash_count"] != 1:
            raise Unmet(f"index 2 of web: {now[2]}")
        return True

    wait_for(healed, 20.0, "web's killed index 2 RUNNING again with crash_count 1")
    wait_all_running(c.bbs, worker, 4, timeout=20.0)
    for guid, n in ((web, 3), (worker, 4)):
        one_process_per_index(guid, all_running(c.bbs, guid, n))


@pytest.mark.timeout(180)
def test_auctioneer_killed_with_requests_queued_everything_runs_once_it_is_back(make_cluster):
    c = make_cluster(cells=3, zones=1, bbs_args=["--stale-unclaimed", "2", "--kick-task", "1"],
                     auctioneer_args=AUCTIONEER_LEASE_TTL)
    first = c.guid("before")
    c.bbs.desire(first, 2)
    wait_all_running(c.bbs, first, 2)

    c.lc.kill("auctioneer", signal.SIGKILL)
    apps = [c.guid(f"queued{i}") for i in range(3)]
    for guid in apps:
        c.bbs.desire(guid, 2)
    task = c.guid("queued-task")
    c.bbs.create_task(task, [app_python(), "-c", "print('ran after all')"])
    c.bbs.scale(first, 3)

    # Nothing can be placed without the auctioneer.
    for guid in apps:
        actuals = c.bbs.actuals(guid)
        assert all(a["state"] == "UNCLAIMED" for a in actuals), (
            f"{guid} placed without an auctioneer: {brief(actuals)}"
        )

    c.lc.restart("auctioneer")

    # A start the dead auctioneer had sent may be delivered twice: the duplicate's claim is refused and
    # its rep stops it, so each index ends with one process (polled: the stop takes a moment).
    for guid, n in [*((guid, 2) for guid in apps), (first, 3)]:
        wait_all_running(c.bbs, guid, n, timeout=45.0)
        wait_for(lambda guid=guid, n=n: one_process_per_index(guid, all_running(c.bbs, guid, n)), 30.0,
                 f"one process per index of {guid}")

    def task_done():
        t = c.bbs.task(task)
        if t["state"] not in ("COMPLETED", "RESOLVING"):
            raise Unmet(f"task {t['state']} rejections {t['rejection_count']} {t['failure_reason']!r}")
        return t

    t = wait_for(task_done, 45.0, f"task {task} completed")
    assert not t["failed"] and "ran after all" in t["result"], f"expected the task to succeed, saw {t}"
    # Placed once each: no index was started twice.
    for guid in apps:
        actuals = c.bbs.actuals(guid)
        assert len(actuals) == 2 and len(running_ordinary(actuals)) == 2, brief(actuals)


@pytest.mark.timeout(180)
def test_auctioneer_killed_mid_auction_loses_its_queue_and_everything_still_runs(make_cluster):
    c = make_cluster(cells=3, zones=1, bbs_args=["--stale-unclaimed", "2"],
                     auctioneer_args=["--cell-state-timeout", "10", *AUCTIONEER_LEASE_TTL])

    def stats() -> dict:
        return httpx.get(f"{c.lc.auctioneer_url}/v1/stats", timeout=2.0, verify=c.lc.verify).json()

    # A rep that does not answer holds the auction in its state fetch; what arrives meanwhile queues up
    # in the auctioneer, and is lost when it is killed.
    stuck = c.reps["cell-2"].proc.pid
    os.kill(stuck, signal.SIGSTOP)
    try:
        first = c.guid("first")
        c.bbs.desire(first, 2)
        wait_for(lambda: expect(stats().get("auction_running"), stats()), 5.0,
                 "the auction for the first app to be under way (waiting on the stopped rep)")
        later = [c.guid(f"later{i}") for i in range(3)]
        for guid in later:
            c.bbs.desire(guid, 2)
        wait_for(lambda: expect(stats()["pending"] >= 6 and stats().get("auction_running"), stats()), 10.0,
                 "the later apps' 6 instances queued behind the running auction")
        c.lc.kill("auctioneer", signal.SIGKILL)
    finally:
        os.kill(stuck, signal.SIGCONT)

    c.lc.restart("auctioneer")
    for guid in [first, *later]:
        wait_all_running(c.bbs, guid, 2, timeout=45.0)
        wait_for(lambda guid=guid: one_process_per_index(guid, all_running(c.bbs, guid, 2)), 30.0,
                 f"one process per index of {guid}")
    hold_for(lambda: all(len(c.bbs.actuals(g)) == 2 for g in [first, *later]), 2.0,
             "exactly 2 actuals per app (nothing placed twice)")
