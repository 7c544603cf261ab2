"""End to end: a rep that gets SIGTERM evacuates — its instances are replaced before they stop."""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from .conftest import (
    Received,
    Unmet,
    actual_lrps_in,
    all_running,
    ask_instance,
    brief,
    expect,
    one_process_per_index,
    proc_alive,
    wait_all_running,
    wait_for,
)

pytestmark = [pytest.mark.e2e]


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


@pytest.mark.timeout(180)
def test_sigterm_rep_replacements_run_before_old_instances_stop(make_cluster, app_writable_dir: Path):
    c = make_cluster(cells=3, zones=1, rep_args=["--stop-grace", "3"])
    events = c.follow_events()
    guid = c.guid("evacuee")
    sigterm_log = (
        app_writable_dir / "sigterm.log"
    )  # each instance notes here when it gets SIGTERM (wall clock)
    sigterm_log.touch()
    sigterm_log.chmod(0o666)  # the instances run under uids of their own
    c.bbs.desire(guid, 4, env={"SIGTERM_LOG": str(sigterm_log)})
    running = wait_all_running(c.bbs, guid, 4)
    per_cell = Counter(a["cell_id"] for a in running.values())
    victims = [cell for cell, n in per_cell.items() if n == 2]
    assert victims, f"expected 4 instances on 3 cells to put 2 on one cell, saw {dict(per_cell)}"
    victim = victims[0]
    old = {i: a for i, a in running.items() if a["cell_id"] == victim}
    old_pid = {i: ask_instance(a["address"]).pid for i, a in old.items()}

    # Each evacuated index as the BBS published it: the old instance marked EVACUATING (event seq), its
    # first RUNNING replacement (the event, whose record says since when it runs), the old record removed.
    evacuating: dict[int, int] = {}
    replacement: dict[int, tuple[Received, dict]] = {}
    old_removed: dict[int, int] = {}

    def on_event(ev: Received) -> None:
        for a in actual_lrps_in(ev.data):
            i = a.get("index")
            if a.get("process_guid") != guid or i not in old:
                continue
            is_old = a.get("cell_id") == victim and a.get("instance_guid") == old[i]["instance_guid"]
            if "removed" in ev.type:
                if is_old:
                    old_removed.setdefault(i, ev.seq)
            elif is_old and a.get("presence") == "EVACUATING":
                evacuating.setdefault(i, ev.seq)
            elif not is_old and a.get("state") == "RUNNING" and a.get("presence") == "ORDINARY":
                replacement.setdefault(i, (ev, a))

    events.on_event.append(on_event)

    # The old processes must all exit in the end.
    exited: set[int] = set()
    stop_watching = threading.Event()

    def watch() -> None:
        while not stop_watching.is_set() and len(exited) < len(old_pid):
            exited.update(i for i, pid in old_pid.items() if not proc_alive(pid))
            time.sleep(0.01)

    # The BBS's view, read fast: at no moment may an evacuated index be without a RUNNING instance
    # (the EVACUATING one until the replacement runs, then the replacement).
    gaps: list[str] = []
    snapshots = [0]

    def poll_bbs() -> None:
        with c.lc.http_client(base_url=c.lc.bbs_url, timeout=5.0) as http:
            while not stop_watching.is_set():
                try:
                    actuals = http.get("/v1/actual_lrps", params={"process_guid": guid}).json()["items"]
                except (httpx.HTTPError, ValueError, KeyError):
                    time.sleep(0.01)
                    continue
                snapshots[0] += 1
                for i in old:
                    if not any(a["index"] == i and a["state"] == "RUNNING" for a in actuals):
                        gaps.append(f"index {i} had no RUNNING instance: {brief(actuals)}")
                time.sleep(0.01)

    watchers = [threading.Thread(target=watch, daemon=True), threading.Thread(target=poll_bbs, daemon=True)]
    for t in watchers:
        t.start()
    try:
        c.lc.kill(victim, signal.SIGTERM)

        def handed_over():
            actuals = c.bbs.actuals(guid)
            now = all_running(c.bbs, guid, 4)
            for i in old:
                if now[i]["cell_id"] == victim:
                    raise Unmet(f"index {i} still on {victim}: {brief(actuals)}")
            if len(exited) < len(old_pid):
                raise Unmet(f"old processes exited: {sorted(exited)} of {sorted(old_pid)}; {brief(actuals)}")
            return now

        now = wait_for(
            handed_over, 60.0, f"indices {sorted(old)} RUNNING off {victim} and their old processes gone"
        )
        rep = c.reps[victim].proc
        wait_for(lambda: expect(rep.poll() is not None, f"rep pid {rep.pid} still running"), 30.0,
                 f"the evacuated rep {victim} to exit once empty")
    finally:
        stop_watching.set()
        for t in watchers:
            t.join(10.0)

    assert rep.returncode == 0, f"expected the drained rep to exit cleanly, saw exit status {rep.returncode}"
    one_process_per_index(guid, now)
    assert all(a["cell_id"] != victim for a in c.bbs.actuals(guid)), brief(c.bbs.actuals(guid))

    # When each old instance was told to stop (it notes the SIGTERM itself, so no polling delay of ours
    # can reorder it against the BBS's own timestamps).
    terms: dict[int, float] = {}
    for line in sigterm_log.read_text().splitlines() if sigterm_log.exists() else []:
        index, instance_guid, at = line.split()
        if int(index) in old and instance_guid == old[int(index)]["instance_guid"]:
            terms.setdefault(int(index), float(at))

    seen = [(e.seq, e.type) for e in events.snapshot()]
    for i in sorted(old):
        assert i in evacuating, (
            f"index {i}: expected an event marking the old instance EVACUATING; events {seen}"
        )
        assert i in replacement, f"index {i}: expected an event with a RUNNING replacement; events {seen}"
        ev, record = replacement[i]
        assert evacuating[i] < ev.seq, (
            f"index {i}: expected EVACUATING (event {evacuating[i]}) before the replacement ran (event "
            f"{ev.seq})"
        )
        assert i in terms, f"index {i}: the old instance never got SIGTERM (log: {sigterm_log.read_text()!r})"
        assert ev.bbs_at is not None, f"expected events to carry `at`, saw {ev}"
        assert epoch(ev.bbs_at) <= terms[i], (
            f"index {i}: the old instance got SIGTERM {epoch(ev.bbs_at) - terms[i]:.3f}s before the BBS "
            f"published its replacement on {record['cell_id']} RUNNING")
    assert snapshots[0] > 10, f"expected many BBS snapshots during the evacuation, took {snapshots[0]}"
    assert not gaps, f"an evacuated index was without a RUNNING instance ({len(gaps)} times): {gaps[:3]}"
    assert set(old_removed) == set(old), (
        f"expected the BBS to remove each EVACUATING record, removed {sorted(old_removed)} of {sorted(old)}")
