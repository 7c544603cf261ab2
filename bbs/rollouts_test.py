"""Versions and rollouts through the API and the driver (bbs/rollouts.py), on each database: the moves
written, the auctions sent with the new version, a crash rolled back, the state read from the table by
a new driver (a restart, a new leader), pause/resume/undo, restarts, and bad input refused."""

from __future__ import annotations

import time
from typing import Any

from tests.support.bbs_harness import AUCTIONEER, Harness, desire, ref, running

from .rollout import RETRIES
from .rollouts import RolloutDriver


def claim(index: int, guid: str, version: int) -> dict[str, Any]:
    return {**ref(index, guid), "version": version}


async def started(h: Harness, instances: int = 2) -> None:
    """An app of `instances` RUNNING on c1 (version 1)."""
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    await desire(h, instances)
    guids = [f"old{i}" for i in range(instances)]
    await h.lifecycle("c1", claimed=[claim(i, g, 1) for i, g in enumerate(guids)],
                      running=[running(i, g) for i, g in enumerate(guids)])


async def put(h: Harness, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = await h.http.put("/v1/desired_lrps/web", json=body)
    assert response.status_code == status, response.text
    return dict(response.json())


async def tick(h: Harness, driver: RolloutDriver | None = None, now: float | None = None) -> dict[str, Any]:
    await (driver or h.bbs.rollout_driver).tick(time.time() if now is None else now)
    await h.settle()
    response = await h.http.get("/v1/desired_lrps/web/rollout")
    assert response.status_code == 200, response.text
    return dict(response.json())


def rows(actuals: list[dict[str, Any]]) -> list[tuple[int, str, str, int]]:
    return sorted((a["index"], a["presence"], a["state"], a["version"]) for a in actuals)


async def test_a_new_definition_is_a_new_version_rolled_out_make_before_break(h: Harness) -> None:
    await started(h)
    change = await put(h, {"command": ["sleep", "2"], "memory_mb": 128, "rollout": {"max_in_flight": 1}})
    assert change["new_version"] is True and change["desired_lrp"]["version"] == 2
    assert change["rollout"]["state"] == "running" and change["rollout"]["from_version"] == 1
    assert (change["rollout"]["done"], change["rollout"]["total"]) == (0, 2)
    versions = (await h.http.get("/v1/desired_lrps/web/versions")).json()["versions"]
    assert [(v["version"], v["current"]) for v in versions] == [(2, True), (1, False)]
    assert versions[0]["definition"]["command"] == ["sleep", "2"]
    assert "instances" not in versions[0]["definition"]

    state = await tick(h)
    assert rows(await h.actuals()) == [(0, "EVACUATING", "RUNNING", 1), (0, "ORDINARY", "UNCLAIMED", 1),
                                      (1, "ORDINARY", "RUNNING", 1)], "one index at a time, the old one kept"
    auctioned = h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]
    assert auctioned["indices"] == [0] and auctioned["desired"]["version"] == 2
    assert auctioned["desired"]["command"] == ["sleep", "2"]
    assert state["done"] == 0

    await h.lifecycle("c2", claimed=[claim(0, "new0", 2)], running=[running(0, "new0")])
    await h.settle()
    assert h.rec.stopped() == [("c1", "old0")], "the old instance stops once its replacement runs"
    await h.lifecycle("c1", removed=[ref(0, "old0")])
    state = await tick(h)
    assert state["done"] == 1
    assert h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]["indices"] == [1]
    await h.lifecycle("c2", claimed=[claim(1, "new1", 2)], running=[running(1, "new1")])
    await h.lifecycle("c1", removed=[ref(1, "old1")])
    state = await tick(h)
    assert (state["state"], state["done"], state["finished_at"] is not None) == ("completed", 2, True)
    assert rows(await h.actuals()) == [(0, "ORDINARY", "RUNNING", 2), (1, "ORDINARY", "RUNNING", 2)]


async def test_the_same_definition_or_a_scale_makes_no_version(h: Harness) -> None:
    await started(h)
    same = await put(h, {"command": ["true"], "memory_mb": 128})
    assert (same["new_version"], same["rollout"], same["desired_lrp"]["version"]) == (False, None, 1)
    scaled = (await h.http.patch("/v1/desired_lrps/web", json={"instances": 3})).json()
    assert (scaled["new_version"], scaled["rollout"], scaled["desired_lrp"]["instances"]) == (False, None, 3)
    policy = (await h.http.patch("/v1/desired_lrps/web", json={"on_cell_loss": "keep-replicas"})).json()
    assert policy["new_version"] is False and policy["desired_lrp"]["version"] == 1
    assert (await h.http.get("/v1/desired_lrps/web/rollout")).status_code == 404
    patched = (await h.http.patch("/v1/desired_lrps/web", json={"env": {"A": "1"}})).json()
    assert patched["new_version"] is True and patched["desired_lrp"]["version"] == 2
    assert patched["desired_lrp"]["instances"] == 3 and patched["desired_lrp"]["command"] == ["true"]


async def test_a_crashing_new_version_is_rolled_back_and_the_old_definition_restored(h: Harness) -> None:
    await started(h)
    await put(h, {"command": ["false"], "memory_mb": 128})
    await tick(h)
    crash = {**ref(0, "bad0"), "reason": "exited 1"}
    await h.lifecycle("c2", claimed=[claim(0, "bad0", 2)], crashed=[crash])
    state = await tick(h)
    assert state["state"] == "rolled_back", state
    assert state["reason"] == "instance 0 of version 2 crashed: exited 1"
    desired = (await h.http.get("/v1/desired_lrps/web")).json()
    assert (desired["version"], desired["command"]) == (1, ["true"])
    assert [r[:3] for r in rows(await h.actuals())] == [
        (0, "ORDINARY", "RUNNING"), (1, "ORDINARY", "RUNNING")]
    history = (await h.http.get("/v1/desired_lrps/web/rollouts")).json()["rollouts"]
    assert [r["state"] for r in history] == ["rolled_back"]
    # The next change is version 3: the failed version's number is not used again.
    assert (await put(h, {"command": ["sleep", "1"], "memory_mb": 128}))["desired_lrp"]["version"] == 3


async def test_without_auto_revert_a_placement_error_pauses_and_resume_goes_on(h: Harness) -> None:
    await started(h)
    await put(h, {"command": ["true"], "memory_mb": 999_999, "rollout": {"auto_revert": False}})
    await tick(h)
    failure = {"fencing_token": 0, "lrps": [{"process_guid": "web", "index": 0,
                                             "error": "insufficient resources: memory"}]}
    # Tried again RETRIES times (a cell may still be freeing the last move's memory), then it pauses.
    for _ in range(RETRIES + 1):
        response = await h.http.post("/v1/placement_failures", json=failure)
        assert response.status_code in (200, 204), response.text
        state = await tick(h)
        if state["state"] != "running":
            break
    assert state["state"] == "paused" and "insufficient resources: memory" in (state["reason"] or ""), state
    assert (await h.http.get("/v1/desired_lrps/web")).json()["version"] == 2, "paused: no rollback"
    assert [r[:3] for r in rows(await h.actuals())] == [
        (0, "ORDINARY", "RUNNING"), (1, "ORDINARY", "RUNNING")]
    assert (await h.http.post("/v1/desired_lrps/web/rollout/pause", json={})).status_code == 409
    resumed = await h.http.post("/v1/desired_lrps/web/rollout/resume", json={})
    assert resumed.status_code == 200 and resumed.json()["state"] == "running"
    assert (await h.http.post("/v1/desired_lrps/web/rollout/resume", json={})).status_code == 409


async def test_a_new_driver_carries_on_from_the_table(h: Harness) -> None:
    await started(h)
    await put(h, {"command": ["sleep", "3"], "memory_mb": 128})
    await tick(h)
    await h.lifecycle("c2", claimed=[claim(0, "new0", 2)], running=[running(0, "new0")])
    await h.lifecycle("c1", removed=[ref(0, "old0")])
    successor = RolloutDriver(h.bbs.uow, h.bbs.rollouts)  # another process (a restart, a new leader)
    state = await tick(h, successor)
    assert state["done"] == 1 and h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]["indices"] == [1]


async def test_pause_undo_and_restarts(h: Harness) -> None:
    await started(h)
    assert (await h.http.post("/v1/desired_lrps/web/rollout/undo", json={})).status_code == 409
    await put(h, {"command": ["sleep", "3"], "memory_mb": 128})
    paused = await h.http.post("/v1/desired_lrps/web/rollout/pause", json={})
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    await tick(h)
    assert h.rec.to(AUCTIONEER + "/v1/lrps") == [] or all(
        b[0]["desired"]["version"] == 1 for b in h.rec.to(AUCTIONEER + "/v1/lrps")), "paused: nothing moves"
    undone = await h.http.post("/v1/desired_lrps/web/rollout/undo", json={})
    assert undone.status_code == 200, undone.text
    assert (undone.json()["kind"], undone.json()["to_version"], undone.json()["state"]) == (
        "rollback", 1, "completed")
    history = (await h.http.get("/v1/desired_lrps/web/rollouts")).json()["rollouts"]
    assert [(r["kind"], r["state"]) for r in history] == [("rollback", "completed"), ("update", "failed")]

    restart = await h.http.post("/v1/desired_lrps/web/restart", json={"max_in_flight": "50%"})
    assert restart.status_code == 200 and restart.json()["kind"] == "restart"
    assert restart.json()["max_in_flight"] == 1 and restart.json()["from_version"] == 1
    await tick(h)
    assert h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]["indices"] == [0]

    h.rec.sent.clear()
    response = await h.http.post("/v1/desired_lrps/web/instances/1/restart", json={})
    assert response.status_code == 202 and response.json() == {}
    await h.settle()
    assert h.rec.stopped() == [("c1", "old1")]
    assert h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]["indices"] == [1]
    assert (await h.http.post("/v1/desired_lrps/web/instances/7/restart", json={})).status_code == 404
    assert (await h.http.post("/v1/desired_lrps/nope/restart", json={})).status_code == 404

    everything = await h.http.post("/v1/desired_lrps/web/restart", json={"all_at_once": True})
    assert everything.json()["state"] == "completed"
    await h.settle()
    assert all(a["state"] == "UNCLAIMED" for a in await h.actuals() if a["presence"] == "ORDINARY")


async def test_bad_input_is_refused_naming_the_field_and_changes_nothing(h: Harness) -> None:
    await started(h)
    before = (await h.http.get("/v1/desired_lrps/web")).json()
    cases = [
        ("put", {"process_guid": "other", "command": ["x"]}, ["body", "process_guid"]),
        ("put", {"command": []}, ["body", "command"]),
        ("patch", {"process_guid": "other"}, ["body", "process_guid"]),
        ("patch", {"memory_mb": -1}, ["body", "memory_mb"]),
        ("patch", {"bogus": 1}, ["body", "bogus"]),
        ("patch", {"command": ["x"], "rollout": {"max_in_flight": "0%"}},
         ["body", "rollout", "max_in_flight"]),
        ("put", {"command": ["x"], "rollout": {"max_in_flight": 0}}, ["body", "rollout", "max_in_flight"]),
    ]
    for method, body, loc in cases:
        response = await getattr(h.http, method)("/v1/desired_lrps/web", json=body)
        assert response.status_code == 422, (method, body, response.text)
        assert response.json()["detail"][0]["loc"] == loc, (body, response.json())
    assert (await h.http.post("/v1/desired_lrps/web/restart", json={"max_in_flight": "x"})).status_code == 422
    assert (await h.http.get("/v1/desired_lrps/web")).json() == before
    assert (await h.http.get("/v1/desired_lrps/web/rollouts")).json() == {"rollouts": []}
    assert (await h.http.put("/v1/desired_lrps/nope", json={"command": ["x"]})).status_code == 404
