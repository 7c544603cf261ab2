"""The recent past from what is always kept: the apps' stories merged across apps in time order with the
cluster's rare events, bounded by the limit, filtered by app, cell and type; and the hub's coverage mark
that decides what of it the recent read answers."""

from __future__ import annotations

from bbs.app_history import AppHistory
from bbs.events import EventFilter, EventHub, event
from bbs.recent_past import ClusterRing, past_events
from tests.support.bbs_harness import Harness


def kept(kind: str, at: float, index: int = 0, cell: str = "cell-1", crashes: int = 0,
         reason: str = "") -> tuple[str, float, int, str, int, str]:
    return (kind, at, index, cell, crashes, reason)


def sources() -> tuple[AppHistory, ClusterRing]:
    history, ring = AppHistory(), ClusterRing()
    history.add("web", kept("placed", 10.0))
    history.add("web", kept("started", 13.0))
    history.add("worker", kept("placed", 11.0, cell="cell-2"))
    history.add("worker", kept("crashed", 14.0, cell="cell-2", crashes=1, reason="exited with status 1"))
    history.add("huge", kept("unplaceable", 12.0, cell="", reason="insufficient resources: memory"))
    history.record_rollout({"process_guid": "web", "state": "completed", "kind": "rolling",
                            "to_version": 2, "done": 1, "total": 1}, 16.0)
    ring.add(15.0, "cordoned", "cell-2")
    ring.add(9.0 + 8, "failed", "cell-1", "job", "exited with status 2", type_="task_changed")
    return history, ring


def test_every_apps_story_and_the_cluster_events_merge_oldest_first() -> None:
    history, ring = sources()
    past = past_events(history, ring, 100)
    assert [(e["at"][17:19], e["type"], e["data"].get("kind")) for e in past] == [
        ("10", "actual_lrp_changed", "placed"), ("11", "actual_lrp_changed", "placed"),
        ("12", "actual_lrp_changed", "unplaceable"), ("13", "actual_lrp_changed", "started"),
        ("14", "actual_lrp_changed", "crashed"), ("15", "cell_changed", "cordoned"),
        ("16", "rollout_changed", "rollout"), ("17", "task_changed", "failed")]
    assert {e["source"] for e in past} == {"story", "cluster"} and not any("id" in e for e in past)
    crashed = past[4]
    assert crashed["data"] == {"process_guid": "worker", "kind": "crashed", "index": 0, "cell_id": "cell-2",
                               "crash_count": 1, "reason": "exited with status 1"}
    assert crashed["text"] == "worker/0 crashed @cell-2 crash #1: exited with status 1"
    assert past[5]["text"] == "cell-2 cordoned"
    assert past[5]["data"] == {"kind": "cordoned", "cell_id": "cell-2"}
    assert past[7]["text"] == "job @cell-1 failed: exited with status 2"


def test_the_limit_keeps_the_newest() -> None:
    history, ring = sources()
    assert [e["data"]["kind"] for e in past_events(history, ring, 3)] == ["cordoned", "rollout", "failed"]
    assert past_events(history, ring, 0) == []


def test_filters_by_app_cell_and_type_are_honoured() -> None:
    history, ring = sources()
    of_web = past_events(history, ring, 100, EventFilter(app="web"))
    assert [e["data"]["kind"] for e in of_web] == ["placed", "started", "rollout"], "a cell's is no app's"
    on_cell2 = past_events(history, ring, 100, EventFilter(cell="cell-2"))
    assert [e["data"]["kind"] for e in on_cell2] == ["placed", "crashed", "cordoned"]
    cells_and_tasks = past_events(history, ring, 100, EventFilter(types=frozenset({"cell_changed",
                                                                                    "task_changed"})))
    assert [e["type"] for e in cells_and_tasks] == ["cell_changed", "task_changed"]
    wanted = EventFilter(cell="cell-2", types=frozenset({"actual_lrp_changed"}))
    actual = past_events(history, ring, 2, wanted)
    assert [e["data"]["kind"] for e in actual] == ["placed", "crashed"]
    assert past_events(history, ring, 100, EventFilter(app="nobody")) == []


def test_only_what_is_older_than_before_is_answered() -> None:
    history, ring = sources()
    assert [e["at"][17:19] for e in past_events(history, ring, 100, before=13.0)] == ["10", "11", "12"]


def test_the_hub_covers_from_its_last_missed_change_and_its_oldest_kept_batch(monkeypatch) -> None:
    clock = iter(range(100, 200))
    monkeypatch.setattr("bbs.events.time.time", lambda: float(next(clock)))
    hub = EventHub(replay_events=2, flush_s=0)
    started = hub.covered_since
    hub.publish([event("auction_completed", {})])
    assert hub.covered_since == started, "everything built since it started is kept"
    hub.missed()
    after_missed = hub.covered_since
    assert after_missed > started
    hub.publish([event("auction_completed", {})])
    hub.publish([event("auction_completed", {})])
    flushed_first = hub._kept[0].flushed_at
    hub.publish([event("auction_completed", {})])  # one batch too many: the oldest goes
    assert hub.covered_since == flushed_first > after_missed


async def test_the_unit_of_work_keeps_cell_and_task_changes_while_nobody_listens(h: Harness) -> None:
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    assert (await h.http.post("/v1/cells/c2/cordon")).status_code == 200
    assert (await h.http.post("/v1/cells/c2/drain")).status_code == 200
    assert (await h.http.post("/v1/cells/c2/uncordon")).status_code == 200
    await h.heartbeat("c2")  # a heartbeat of a cell already present is no news
    await h.heartbeat("c1", evacuating=True)
    await h.heartbeat("c1", evacuating=True)  # still evacuating: no news
    created = await h.http.post("/v1/tasks", json={"task_guid": "t1", "command": ["true"], "memory_mb": 64})
    assert created.status_code == 201, created.text
    assert (await h.http.post("/v1/tasks/t1/cancel")).status_code == 200
    assert not h.bbs.hub.listening

    items = (await h.http.get("/v1/events/recent")).json()["items"]
    assert [(e["type"], e["text"]) for e in items if e["source"] == "cluster"] == [
        ("cell_appeared", "c1 appeared"), ("cell_appeared", "c2 appeared"), ("cell_changed", "c2 cordoned"),
        ("cell_changed", "c2 draining"), ("cell_changed", "c2 uncordoned"), ("cell_changed", "c1 evacuating"),
        ("task_changed", "t1 failed: cancelled")]
