"""End to end: a rep killed and restarted before its presence expires.

The cell never stops heartbeating, so waiting for its presence to expire would wait forever; the new
boot id in its first heartbeat tells the BBS that whatever the cell held is gone: its instances are placed
again, its running task fails.
"""

from __future__ import annotations

import signal

import pytest

from common.procutil import app_python

from .conftest import Unmet, all_running, brief, expect, one_process_per_index, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e]

TTL = "60"  # far longer than the test may take: recovery must not come from expiry


@pytest.mark.timeout(150)
def test_instances_of_a_rep_restarted_within_its_ttl_are_placed_again_and_its_tasks_fail(make_cluster):
    c = make_cluster(cells=2, zones=1, bbs_args=["--presence-ttl", TTL], rep_args=["--presence-ttl", TTL])
    web, job = c.guid("web"), c.guid("job")
    c.bbs.desire(web, 4)
    before = wait_all_running(c.bbs, web, 4)
    c.bbs.create_task(job, [app_python(), "-c", "import time; time.sleep(600)"], memory_mb=64, disk_mb=64)
    running_task = wait_for(lambda: expect(c.bbs.task(job)["state"] == "RUNNING" and c.bbs.task(job),
                                           c.bbs.task(job)), 30.0, f"task {job} RUNNING")
    victim = running_task["cell_id"]  # the rep to restart: the one running the task (and some of web)
    lost = {i for i, a in before.items() if a["cell_id"] == victim}

    events = c.follow_events()
    c.lc.kill(victim, signal.SIGKILL)
    c.lc.restart(victim)

    def replaced():
        now = all_running(c.bbs, web, 4)
        stale = [i for i in lost if now[i]["instance_guid"] == before[i]["instance_guid"]]
        if stale:
            raise Unmet(f"indices {stale} still show the dead instance: {brief(c.bbs.actuals(web))}")
        return now

    # The wait ends long before a TTL: only the new boot id can have had them placed again, and the cell's
    # presence never expired on the way.
    now = wait_for(replaced, 40.0, f"indices {sorted(lost)} of {web} RUNNING again after {victim} restarted")
    expired = [e for e in events.snapshot()
               if e.type == "cell_disappeared" and e.data.get("cell_id") == victim]
    assert not expired, f"recovered by presence expiry: {expired}"
    one_process_per_index(web, now)

    # The task died with its rep, and the restarted rep does not run it: it fails (never runs again).
    task = wait_for(lambda: expect(c.bbs.task(job)["state"] in ("COMPLETED", "RESOLVING") and c.bbs.task(job),
                                   c.bbs.task(job)), 20.0, f"task {job} COMPLETED after {victim} restarted")
    assert (task["failed"], task["failure_reason"]) == (True, "cell restarted before completion"), task
