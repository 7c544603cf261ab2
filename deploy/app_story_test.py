"""The story of an app (deploy/app_story.py): assembly from the wire's data, the crash-loop naming and the
next restart time, and the text within 80 columns."""

from __future__ import annotations

from typing import Any

from bbs.restart_policy import RestartPolicy

from .app_story import WIDTH, assemble, backoff, render, restart_status, rfc3339

POLICY = {"immediate_restarts": 3, "backoff_min": 30.0, "backoff_max": 960.0, "max_restarts": 200,
          "reset_after": 300.0}
NOW = 1_800_000_000.0


def desired(**over: Any) -> dict[str, Any]:
    return {"process_guid": "web", "domain": "default", "instances": 2, "version": 3,
            "command": ["sh", "-c", "exit 1"], "memory_mb": 64, "disk_mb": 128, "ports": [8080],
            "created_at": rfc3339(NOW - 3600), **over}


def actual(index: int, state: str, since: float, **over: Any) -> dict[str, Any]:
    return {"process_guid": "web", "index": index, "state": state, "presence": "ORDINARY",
            "cell_id": "cell-1" if state in ("CLAIMED", "RUNNING") else "", "since": rfc3339(since),
            "crash_count": 0, "crash_reason": "", "placement_error": "", "version": 3, **over}


def events(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"events": list(entries), "kept": 50, "restart_policy": POLICY}


def test_the_backoff_is_the_bbs_restart_policy() -> None:
    policy = RestartPolicy()
    for crashes in (1, 2, 3, 4, 5, 8, 10, 200, 201, 500):
        assert backoff(POLICY, crashes) == policy.backoff(crashes), crashes


def test_a_few_crashes_restart_at_once_and_are_no_crash_loop() -> None:
    status = restart_status(POLICY, "CRASHED", 2, NOW - 1, NOW)
    assert status["crash_loop"] is False and status["backoff_s"] == 0.0
    assert status["next_restart_in_s"] == 0.0


def test_a_crash_loop_is_named_with_its_backoff_and_next_restart() -> None:
    status = restart_status(POLICY, "CRASHED", 5, NOW - 20, NOW)
    assert status["crash_loop"] is True
    assert status["backoff_s"] == 120.0  # 30 s doubled twice past the third crash
    assert status["next_restart_at"] == rfc3339(NOW + 100) and status["next_restart_at"].endswith("Z")
    assert status["next_restart_in_s"] == 100.0


def test_past_max_restarts_it_is_never_restarted() -> None:
    status = restart_status(POLICY, "CRASHED", 201, NOW - 20, NOW)
    assert status["gave_up"] is True and status["next_restart_at"] is None


def test_a_running_instance_has_no_restart_pending_nor_loop() -> None:
    status = restart_status(POLICY, "RUNNING", 7, NOW - 20, NOW)
    assert status == {"crash_loop": False, "backoff_s": None, "next_restart_at": None,
                      "next_restart_in_s": None, "gave_up": False}


def test_assembles_a_crash_looping_app() -> None:
    story = assemble(
        desired(instances=1), [actual(0, "CRASHED", NOW - 10, crash_count=4, crash_reason="exited with 1")],
        None, events({"kind": "crashed", "at": rfc3339(NOW - 10), "index": 0, "crash_count": 4,
                      "reason": "exited with 1"}), NOW)
    assert story["status"] == "crash loop"
    [instance] = story["instances"]
    assert instance["crashes"] == 4 and instance["last_crash_reason"] == "exited with 1"
    assert instance["backoff_s"] == 60.0 and instance["next_restart_in_s"] == 50.0
    assert story["events"][0]["kind"] == "crashed"
    text = "\n".join(render(story))
    assert "crash loop" in text and "exited with 1" in text and "in 50s (back-off 1m00s)" in text


def test_assembles_an_unplaceable_app_with_its_placement_error() -> None:
    error = "insufficient resources: memory (no cell has 99999 MB)"
    story = assemble(desired(instances=1, memory_mb=99999),
                     [actual(0, "UNCLAIMED", NOW - 5, placement_error=error)], None, events(), NOW)
    assert story["status"] == "unplaceable" and story["placement_error"] == error
    assert any(line.startswith("Placement error: insufficient") for line in render(story))


def test_assembles_a_healthy_app_with_uptime_rollout_and_events_newest_first() -> None:
    placed = {"kind": "placed", "at": rfc3339(NOW - 60), "index": 0, "cell_id": "cell-1"}
    started = {"kind": "started", "at": rfc3339(NOW - 59), "index": 0, "cell_id": "cell-1"}
    rollout = {"kind": "update", "state": "completed", "from_version": 2, "to_version": 3, "done": 2,
               "total": 2, "reason": None, "started_at": rfc3339(NOW - 70), "finished_at": rfc3339(NOW - 50)}
    story = assemble(desired(), [actual(1, "RUNNING", NOW - 30), actual(0, "RUNNING", NOW - 59)], rollout,
                     events(placed, started), NOW)
    assert story["status"] == "running" and story["running_instances"] == 2
    assert [i["index"] for i in story["instances"]] == [0, 1]
    assert story["instances"][0]["uptime_s"] == 59.0
    assert [e["kind"] for e in story["events"]] == ["started", "placed"]
    assert story["rollout"]["state"] == "completed" and story["rollout"]["finished_at"].endswith("Z")
    assert story["created_at"].endswith("Z")


def test_the_text_fits_80_columns_and_shows_no_control_sequences() -> None:
    long = "x" * 300 + "\x1b]0;pwned\x07" + "\u202e"
    story = assemble(
        desired(process_guid="web-" + "a" * 100, command=["sh", "-c", long]),
        [actual(0, "CRASHED", NOW - 10, crash_count=9, crash_reason=long, cell_id="c" * 60),
         actual(1, "UNCLAIMED", NOW, placement_error=long)],
        None, events({"kind": "crashed", "at": rfc3339(NOW), "index": 0, "cell_id": "c" * 60,
                      "reason": long}), NOW)
    lines = render(story)
    assert max(len(line) for line in lines) <= WIDTH, [line for line in lines if len(line) > WIDTH]
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b" in text
