"""End to end: `vendue app NAME` on a real cluster (TLS on), over both transports — the BBS keeps each
app's last events, and the CLI tells an app's story: a crash loop with its crash count, reason and next
restart; an unplaceable app's placement error; a healthy app's placements."""

from __future__ import annotations

import json

import pytest

from .conftest import E2ECluster, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

CLUSTER = {"cells": 2, "zones": 1}  # LocalCluster's cells: 4096 MB each


def story(c: E2ECluster, guid: str) -> dict:
    result = c.cli("app", guid, "--json")
    expect(result.code == 0, f"exit {result.code}: {result.output}")
    return dict(json.loads(result.stdout))


def test_an_app_that_exits_at_once_is_shown_as_a_crash_loop(shared_cluster):
    c = shared_cluster
    guid = c.guid("crashloop")
    c.bbs.desire(guid, 1, command=["sh", "-c", "exit 3"])

    def looping() -> dict:
        s = story(c, guid)
        [instance] = s["instances"]
        expect(s["status"] == "crash loop" and instance["state"] == "CRASHED", s)
        return s

    # Crashes 1 and 2 restart at once; the third waits out Diego's 30 s back-off.
    s = wait_for(lambda: looping(), 60.0, f"{guid} named a crash loop")
    [instance] = s["instances"]
    assert instance["crash_loop"] is True and instance["crashes"] >= 3, instance
    assert instance["last_crash_reason"] == "exited with status 3", instance
    assert instance["backoff_s"] >= 30.0 and instance["next_restart_at"].endswith("Z"), instance
    assert 0.0 <= instance["next_restart_in_s"] <= instance["backoff_s"], instance
    crashes = [e for e in s["events"] if e["kind"] == "crashed"]
    assert len(crashes) >= 3 and crashes[0]["reason"] == "exited with status 3", s["events"]
    assert any(e["kind"] == "restarting" for e in s["events"]), s["events"]

    text = c.cli("app", guid)
    assert text.code == 0, text.output
    lines = text.stdout.splitlines()
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    assert "Status: crash loop: 0 of 1 running" in text.stdout, text.stdout
    assert f"#0 crash loop: {instance['crashes']} crashes; restarts after a back-off of" in text.stdout, \
        text.stdout
    assert "#0 last crash: exited with status 3" in text.stdout, text.stdout
    row = next(line for line in lines if line.strip().startswith("0  CRASHED"))
    assert "(back-off" in row and ("in " in row or "due now" in row), row


def test_an_unplaceable_app_shows_its_placement_error(shared_cluster):
    c = shared_cluster
    guid = c.guid("huge")
    c.bbs.desire(guid, 1, memory_mb=100_000)

    def unplaceable() -> dict:
        s = story(c, guid)
        expect(s["status"] == "unplaceable" and s["placement_error"], s)
        return s

    s = wait_for(lambda: unplaceable(), 30.0, f"{guid} shown unplaceable with its placement error")
    assert s["placement_error"].startswith("insufficient resources: memory"), s
    assert any(e["kind"] == "unplaceable" for e in s["events"]), s["events"]
    text = c.cli("app", guid)
    assert text.code == 0, text.output
    assert "Placement error: insufficient resources: memory" in text.stdout, text.stdout


def test_a_healthy_app_shows_its_placements(shared_cluster):
    c = shared_cluster
    guid = c.guid("healthy")
    c.bbs.desire(guid, 2, memory_mb=64)
    running = wait_all_running(c.bbs, guid, 2)

    def told() -> dict:
        s = story(c, guid)
        kinds = {(e["kind"], e.get("index")) for e in s["events"]}
        expect({("placed", 0), ("placed", 1), ("started", 0), ("started", 1)} <= kinds, s["events"])
        return s

    s = wait_for(lambda: told(), 30.0, f"{guid}'s placements and starts among its events")
    assert s["status"] == "running" and s["running_instances"] == 2, s
    for instance in s["instances"]:
        assert instance["cell_id"] == running[instance["index"]]["cell_id"], (instance, running)
        assert instance["uptime_s"] >= 0 and instance["crashes"] == 0 and not instance["crash_loop"], instance
    placed = {e["index"]: e["cell_id"] for e in s["events"] if e["kind"] == "placed"}
    assert placed == {i: running[i]["cell_id"] for i in (0, 1)}, (placed, running)
    assert all(e["at"].endswith("Z") for e in s["events"]), s["events"]

    text = c.cli("app", guid)
    assert text.code == 0, text.output
    assert "Status: running: 2 of 2 running" in text.stdout, text.stdout
    assert sum(" placed " in line for line in text.stdout.splitlines()) == 2, text.stdout

    missing = c.cli("app", c.guid("nosuch"))
    assert missing.code == 1 and "no app named" in missing.output, missing.output


def test_a_rolling_update_is_in_the_story(shared_cluster):
    c = shared_cluster
    guid = c.guid("rolled")
    c.bbs.desire(guid, 1, memory_mb=64)
    wait_all_running(c.bbs, guid, 1)
    changed = c.bbs.http.patch(f"/v1/desired_lrps/{guid}", json={"env": {"COLOUR": "blue"}})
    assert changed.status_code == 200, changed.text

    def rolled() -> dict:
        s = story(c, guid)
        rollouts = [e for e in s["events"] if e["kind"] == "rollout"]
        expect(s["version"] == 2 and s["rollout"] is not None and s["rollout"]["state"] == "completed"
               and rollouts and rollouts[0]["state"] == "completed", s)
        return s

    s = wait_for(lambda: rolled(), 60.0, f"{guid}'s completed rollout in its story")
    assert s["rollout"]["to_version"] == 2 and s["rollout"]["finished_at"].endswith("Z"), s["rollout"]
    kinds = [e["kind"] for e in s["events"]]
    # make-before-break: the old copy evacuating, the new one placed and started, then the old one removed
    assert kinds.count("placed") >= 2 and "evacuating" in kinds and kinds[:4].count("evacuated") == 1, kinds
    text = c.cli("app", guid)
    assert text.code == 0, text.output
    assert "Rollout: update v1 -> v2: completed, 1/1 done" in text.stdout, text.stdout
