"""The BBS HTTP API in-process (httpx ASGITransport), on SQLite and on PostgreSQL. The auctioneer, the reps
and callback receivers are one recording transport: we see exactly what the BBS sends them. Authorization
is off here (insecure: every caller an admin); policy_test.py serves the same API over HTTPS with it on."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from bbs.api import create_app
from tests.support.bbs_harness import AUCTIONEER, Harness, desire, ref, running
from tests.support.polling import eventually, expect


async def test_ping_and_metrics(h: Harness) -> None:
    assert (await h.http.get("/ping")).json() == {"ok": True, "ready": True, "insecure": True}
    assert (await h.http.get("/livez")).json() == {"ok": True}
    assert (await h.http.get("/readyz")).json() == {"ready": True}
    await h.http.get("/v1/desired_lrps")
    text = (await h.http.get("/metrics")).text
    sample = 'vendue_http_request_duration_seconds_count{method="GET",route="/v1/desired_lrps",status="200"}'
    assert f"{sample} 1.0" in text


async def test_desire_creates_unclaimed_actuals_and_one_start_request(h: Harness) -> None:
    created = await desire(h, 3)
    assert created["modification_tag"]["index"] == 0 and created["instances"] == 3
    await h.settle()
    [starts] = h.rec.to(AUCTIONEER + "/v1/lrps")
    assert [(s["desired"]["process_guid"], s["indices"]) for s in starts] == [("web", [0, 1, 2])]
    assert starts[0]["desired"]["memory_mb"] == 128
    assert [(a["index"], a["state"], a["presence"]) for a in await h.actuals()] == [
        (0, "UNCLAIMED", "ORDINARY"),
        (1, "UNCLAIMED", "ORDINARY"),
        (2, "UNCLAIMED", "ORDINARY"),
    ]
    again = await h.http.post("/v1/desired_lrps", json={"process_guid": "web", "command": ["true"]})
    assert again.status_code == 409
    assert (await h.http.get("/v1/desired_lrps/web")).json()["process_guid"] == "web"
    assert (await h.http.get("/v1/desired_lrps/nope")).status_code == 404


async def test_concurrent_desires_share_a_transaction_and_duplicates_conflict(h: Harness) -> None:
    import asyncio

    bodies = [{"process_guid": f"app{i % 5}", "instances": 2,
               "command": ["true"]} for i in range(6)]  # app0 twice
    responses = await asyncio.gather(*(h.http.post("/v1/desired_lrps", json=b) for b in bodies))
    assert sorted(r.status_code for r in responses) == [201] * 5 + [409]
    assert len(await h.actuals()) == 10
    await h.settle()
    starts = [s for batch in h.rec.to(AUCTIONEER + "/v1/lrps") for s in batch]
    assert sorted((s["desired"]["process_guid"], s["indices"]) for s in starts) == [
        (f"app{i}", [0, 1]) for i in range(5)
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"process_guid": "web", "memory_mb": -1}, "memory_mb"),
        ({"process_guid": "web", "memory_mb": 10**9}, "memory_mb"),
        ({"process_guid": "web", "instances": 10_001, "command": ["true"]}, "instances"),
        ({"process_guid": "bad name!", "command": ["true"]}, "process_guid"),
        ({"process_guid": "web", "colour": "red"}, "colour"),
        ({"process_guid": "web", "instances": 1}, "command"),
        ({"process_guid": "web", "instances": 1, "command": []}, "command"),
        ({"process_guid": "web", "command": ["true"], "objective": "1 / (azs - azs)"}, "objective"),
    ],
)
async def test_bad_desired_lrp_is_422_naming_the_field_and_writes_nothing(
    h: Harness, body: dict, field: str
) -> None:
    response = await h.http.post("/v1/desired_lrps", json=body)
    assert response.status_code == 422
    assert any(err["loc"][-1] == field for err in response.json()["detail"]), response.json()
    assert (await h.http.get("/v1/desired_lrps")).json() == {"items": []}
    assert await h.actuals() == []


async def test_a_body_that_is_not_json_is_422(h: Harness) -> None:
    for content, headers in [(b"{not json", {"content-type": "application/json"}), (b"hello", {}), (b"", {})]:
        response = await h.http.post("/v1/desired_lrps", content=content, headers=headers)
        assert response.status_code == 422, (content, response.text)
        assert response.json()["detail"][0]["loc"][0] == "body"
    response = await h.http.post("/v1/tasks", content=b"[1,", headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert (await h.http.get("/v1/desired_lrps")).json() == {"items": []}
    assert (await h.http.get("/v1/tasks")).json() == {"items": []}


async def test_bad_query_and_path_values_are_422(h: Harness) -> None:
    assert (await h.http.get("/v1/actual_lrps", params={"state": "SLEEPING"})).status_code == 422
    response = await h.http.put(
        "/v1/cells",
        json={"cells": [{
            "cell_id": "not a guid!",
            "zone": "z",
            "rep_url": "http://x",
            "total": {"memory_mb": 1, "disk_mb": 1, "containers": 1},
        }]},
    )
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == [
        "body",
        "cells",
        0,
        "cell_id",
    ]
    assert (await h.http.get("/v1/cells")).json() == {"items": []}


async def test_claim_run_and_conflicting_claims(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 2)
    result = await h.lifecycle("c1", claimed=[ref(0, "a"), ref(1, "b")], running=[running(0, "a", 61001)])
    assert result == {"refused": [], "refused_tasks": []}
    rows = {a["index"]: a for a in await h.actuals()}
    assert (rows[0]["state"], rows[0]["address"], rows[0]["zone"], rows[0]["cell_id"]) == (
        "RUNNING",
        "127.0.0.1:61001",
        "z1",
        "c1",
    )
    assert rows[1]["state"] == "CLAIMED"
    summary = (await h.http.get("/v1/actual_lrps/summary")).json()
    assert summary == {"total": 2, "by_state": {"RUNNING": 1, "CLAIMED": 1}, "by_presence": {"ORDINARY": 2}}
    assert (await h.http.get("/v1/actual_lrps/summary", params={"process_guid": "x"})).json()["total"] == 0
    # Another cell claiming the same index, or reporting an unknown instance, is refused.
    result = await h.lifecycle("c2", claimed=[ref(1, "z")], running=[running(0, "ghost")])
    assert result["refused"] == [ref(1, "z"), ref(0, "ghost")]


async def test_crash_restart_policy_through_the_api(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 1)
    for crash, guid in enumerate(["a", "b", "c"], start=1):
        await h.lifecycle("c1", claimed=[ref(0, guid)], running=[running(0, guid)])
        await h.lifecycle("c1", crashed=[{**ref(0, guid), "reason": "exited with status 137"}])
        [row] = await h.actuals()
        assert row["crash_count"] == crash and row["crash_reason"] == "exited with status 137"
        assert row["state"] == ("CRASHED" if crash == 3 else "UNCLAIMED")
    await h.settle()
    assert [s[0]["indices"] for s in h.rec.to(AUCTIONEER + "/v1/lrps")] == [
        [0],
        [0],
        [0],
    ]  # desire + 2 restarts


async def test_scaling_down_stops_extra_instances_on_their_rep_and_up_auctions(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 3)
    await h.lifecycle(
        "c1", claimed=[ref(i, f"g{i}") for i in range(3)], running=[running(i, f"g{i}") for i in range(3)]
    )
    tag = (await h.http.get("/v1/desired_lrps/web")).json()["modification_tag"]
    response = await h.http.patch("/v1/desired_lrps/web", json={"instances": 1, "modification_tag": tag})
    assert response.status_code == 200 and response.json()["desired_lrp"]["instances"] == 1
    stale = await h.http.patch("/v1/desired_lrps/web", json={"instances": 5, "modification_tag": tag})
    assert stale.status_code == 409
    await h.settle()
    assert {url for url, _ in h.rec.sent if url.startswith("http://c1.rep")} == {"http://c1.rep/stop"}
    assert h.rec.stopped() == [("c1", "g1"), ("c1", "g2")]
    assert [a["index"] for a in await h.actuals()] == [0]
    # A late `removed` from the rep for a deleted index is simply ignored.
    assert (await h.lifecycle("c1", removed=[ref(1, "g1")]))["refused"] == []
    assert (await h.http.patch("/v1/desired_lrps/web", json={"instances": 3})).status_code == 200
    await h.settle()
    assert h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]["indices"] == [1, 2]
    assert (await h.http.patch("/v1/desired_lrps/web", json={"bogus": 1})).status_code == 422


async def test_delete_desired_stops_and_removes_everything(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 2)
    await h.lifecycle("c1", claimed=[ref(0, "a")], running=[running(0, "a")])
    assert (await h.http.delete("/v1/desired_lrps/web")).status_code == 204
    assert (await h.http.delete("/v1/desired_lrps/web")).status_code == 404
    await h.settle()
    assert await h.actuals() == []
    assert h.rec.stopped() == [("c1", "a")]


async def test_auctioneer_down_still_accepts_and_leaves_state_for_convergence(h: Harness) -> None:
    h.rec.auctioneer_down = True
    await desire(h, 2)
    await h.settle()
    assert [a["state"] for a in await h.actuals()] == ["UNCLAIMED", "UNCLAIMED"]
    h.rec.auctioneer_down = False
    await h.bbs.convergence.run_pass(time.time() + 31)  # stale unclaimed: auctioned again
    await h.settle()
    [starts] = h.rec.to(AUCTIONEER + "/v1/lrps")
    assert starts[0]["indices"] == [0, 1]


async def test_placement_failures_mark_lrps_and_fail_tasks_after_three(h: Harness) -> None:
    await desire(h, 1)
    response = await h.http.post("/v1/tasks", json={"task_guid": "t1", "command": ["true"], "memory_mb": 64})
    assert response.status_code == 201 and response.json()["state"] == "PENDING"
    failure = {
        "lrps": [
            {
                "process_guid": "web",
                "index": 0,
                "error": "insufficient resources: memory",
                "detail": "0/1 cells fit",
            }
        ],
        "tasks": [{"task_guid": "t1", "error": "insufficient resources: memory"}],
    }
    for _ in range(3):
        assert (await h.http.post("/v1/placement_failures", json=failure)).status_code == 204
    [row] = await h.actuals()
    assert row["placement_error"] == "insufficient resources: memory — 0/1 cells fit"
    task = (await h.http.get("/v1/tasks/t1")).json()
    assert (task["state"], task["failed"], task["failure_reason"], task["rejection_count"]) == (
        "COMPLETED",
        True,
        "insufficient resources: memory",
        3,
    )
    await h.settle()
    assert len(h.rec.to(AUCTIONEER + "/v1/tasks")) >= 2  # the create, then the re-queues (coalesced)
    requeued = [r["task"]["rejection_count"] for batch in h.rec.to(AUCTIONEER + "/v1/tasks") for r in batch]
    assert requeued == [0, 1, 2]


async def test_task_lifecycle_with_callback(h: Harness) -> None:
    await h.heartbeat("c1")
    body = {
        "task_guid": "t1",
        "command": ["echo", "hi"],
        "completion_callback_url": "http://callback.test/done",
    }
    assert (await h.http.post("/v1/tasks", json=body)).status_code == 201
    assert (await h.http.post("/v1/tasks", json=body)).status_code == 409
    assert (await h.lifecycle("c2", tasks_started=["nope"]))["refused_tasks"] == ["nope"]
    assert (await h.lifecycle("c1", tasks_started=["t1"]))["refused_tasks"] == []
    assert (await h.lifecycle("c2", tasks_started=["t1"]))["refused_tasks"] == ["t1"]
    assert (await h.http.get("/v1/tasks", params={"state": "RUNNING"})).json()["items"][0]["cell_id"] == "c1"
    assert (await h.http.delete("/v1/tasks/t1")).status_code == 409
    await h.lifecycle("c1", tasks_completed=[{"task_guid": "t1", "exit_status": 0, "result": "hi\n"}])
    await h.settle()
    [delivered] = h.rec.to("http://callback.test/done")
    assert (delivered["state"], delivered["result"], delivered["exit_status"]) == ("COMPLETED", "hi\n", 0)
    assert (await h.http.get("/v1/tasks/t1")).status_code == 404  # resolved once the callback took it


async def test_a_cell_whose_rep_restarted_fails_the_tasks_it_ran(h: Harness) -> None:
    await h.heartbeat("c1", boot_id="b1")
    await h.heartbeat("c2", boot_id="b1")
    for guid in ("t1", "t2"):
        body = {"task_guid": guid, "command": ["sleep", "9"], "completion_callback_url": "http://callback.test/"}
        assert (await h.http.post("/v1/tasks", json=body)).status_code == 201
    await h.lifecycle("c1", tasks_started=["t1"])
    await h.lifecycle("c2", tasks_started=["t2"])
    await h.heartbeat("c1", boot_id="b1")  # the same rep: nothing changes
    assert (await h.http.get("/v1/tasks/t1")).json()["state"] == "RUNNING"

    await h.heartbeat("c1", boot_id="b2")  # c1's rep restarted: it runs nothing it ran before
    t1, t2 = [(await h.http.get(f"/v1/tasks/{g}")).json() for g in ("t1", "t2")]
    assert (t1["state"], t1["failed"], t1["failure_reason"]) == (
        "COMPLETED", True, "cell restarted before completion"), t1
    assert t2["state"] == "RUNNING", "another cell's task runs on"
    await h.settle()
    assert [(d["task_guid"], d["failed"]) for d in h.rec.to("http://callback.test/")] == [("t1", True)]


async def test_cancel_and_delete_task(h: Harness) -> None:
    await h.heartbeat("c1")
    for guid in ("t1", "t2"):
        assert (
            await h.http.post("/v1/tasks", json={"task_guid": guid, "command": ["sleep", "9"]})
        ).status_code == 201
    await h.lifecycle("c1", tasks_started=["t2"])
    for guid in ("t1", "t2"):
        cancelled = (await h.http.post(f"/v1/tasks/{guid}/cancel")).json()
        assert (cancelled["state"], cancelled["failed"], cancelled["failure_reason"]) == (
            "COMPLETED",
            True,
            "cancelled",
        )
    assert (await h.http.post("/v1/tasks/t1/cancel")).status_code == 409
    await h.settle()
    assert {u for u, _ in h.rec.sent if u.startswith("http://c1.rep")} == {"http://c1.rep/cancel"}
    assert h.rec.cancelled() == [("c1", "t2")]
    assert (await h.http.delete("/v1/tasks/t1")).status_code == 204
    assert (await h.http.get("/v1/tasks/t1")).status_code == 404
    assert [t["task_guid"] for t in (await h.http.get("/v1/tasks")).json()["items"]] == ["t2"]


async def test_a_host_reports_many_cells_in_one_request(h: Harness) -> None:
    """PUT /v1/cells and POST /v1/lifecycle: what a rep process hosting many cells sends per round."""
    presences = [
        {"cell_id": cid, "zone": zone, "rep_url": f"http://rep/cells/{cid}",
         "total": {"memory_mb": 4096, "disk_mb": 8192, "containers": 100}}
        for cid, zone in (("c1", "z1"), ("c2", "z2"))
    ]
    assert (await h.http.put("/v1/cells", json={"cells": presences})).status_code == 200
    assert [c["cell_id"] for c in (await h.http.get("/v1/cells")).json()["items"]] == ["c1", "c2"]
    await desire(h, 2)
    body = {"cells": {"c1": {"claimed": [ref(0, "a")], "running": [running(0, "a", 61001)]},
                      "c2": {"claimed": [ref(1, "b"), ref(0, "dup")]}}}
    response = await h.http.post("/v1/lifecycle", json=body)
    assert response.status_code == 200, response.text
    # Each cell's part is answered on its own.
    assert response.json() == {"cells": {"c1": {"refused": [], "refused_tasks": []},
                                         "c2": {"refused": [ref(0, "dup")], "refused_tasks": []}}}
    rows = {a["index"]: (a["state"], a["cell_id"], a["zone"]) for a in await h.actuals()}
    assert rows == {0: ("RUNNING", "c1", "z1"), 1: ("CLAIMED", "c2", "z2")}
    # Bad input names the field and changes nothing.
    bad = await h.http.post("/v1/lifecycle", json={"cells": {"not a guid!": {}}})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "cells"], bad.text
    bad = await h.http.put("/v1/cells", json={"cells": [{**presences[0], "cell_id": "c3", "zone": 5}]})
    assert bad.status_code == 422 and "zone" in bad.json()["detail"][0]["loc"], bad.text
    assert [c["cell_id"] for c in (await h.http.get("/v1/cells")).json()["items"]] == ["c1", "c2"]


async def test_cells_presence_list(h: Harness) -> None:
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    cells = (await h.http.get("/v1/cells")).json()["items"]
    assert [c["cell_id"] for c in cells] == ["c1", "c2"] and cells[0]["expires_at"]


async def test_evacuation_replaces_running_instances_then_stops_the_old_ones(h: Harness) -> None:
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    await desire(h, 2)
    await h.lifecycle("c1", claimed=[ref(0, "a"), ref(1, "b")], running=[running(0, "a"), running(1, "b")])
    await h.heartbeat("c1", evacuating=True)
    await h.heartbeat("c1", evacuating=True)  # a second heartbeat changes nothing more
    rows = await h.actuals()
    assert sorted((a["index"], a["presence"], a["state"]) for a in rows) == [
        (0, "EVACUATING", "RUNNING"),
        (0, "ORDINARY", "UNCLAIMED"),
        (1, "EVACUATING", "RUNNING"),
        (1, "ORDINARY", "UNCLAIMED"),
    ]
    await h.settle()
    assert h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]["indices"] == [0, 1]
    await h.lifecycle("c2", claimed=[ref(0, "a2")], running=[running(0, "a2")])
    await h.settle()
    assert sorted((a["index"], a["presence"], a["cell_id"]) for a in await h.actuals()) == [
        (0, "ORDINARY", "c2"),
        (1, "EVACUATING", "c1"),
        (1, "ORDINARY", ""),
    ]
    assert h.rec.stopped() == [("c1", "a")]
    # The old cell reporting the stopped evacuee as removed is fine; the other one crashing drops it.
    await h.lifecycle("c1", removed=[ref(0, "a")], crashed=[ref(1, "b")])
    assert sorted((a["index"], a["presence"]) for a in await h.actuals()) == [
        (0, "ORDINARY"),
        (1, "ORDINARY"),
    ]


async def test_cell_states_carry_the_heartbeats_capacity_and_the_operators_flags(h: Harness) -> None:
    left = {"memory_mb": 1024, "disk_mb": 2048, "containers": 7}
    assert await h.heartbeat("c1", available=left, instances=3, starting=1) == []
    await h.heartbeat("c2")  # a rep too old to say what it has left
    cells = {c["cell_id"]: c for c in (await h.http.get("/v1/cells")).json()["items"]}
    assert (cells["c1"]["available"], cells["c1"]["instances"], cells["c1"]["starting"]) == (left, 3, 1)
    assert (cells["c2"]["available"], cells["c2"]["instances"]) == (None, 0)
    assert {(c["state"], c["cordoned"], c["draining"]) for c in cells.values()} == {("present", False, False)}
    # A rep cannot cordon its own cell (nor say it is suspect): those are the BBS's.
    assert await h.heartbeat("c2", cordoned=True, draining=True, state="suspect") == []
    assert (await h.http.get("/v1/cells")).json()["items"][1]["cordoned"] is False
    negative = await h.http.put("/v1/cells", json={"cells": [{
        "cell_id": "c3", "zone": "z1", "rep_url": "http://c3.rep", "instances": -1,
        "total": {"memory_mb": 1, "disk_mb": 1, "containers": 1}}]})
    assert negative.status_code == 422 and negative.json()["detail"][0]["loc"][-1] == "instances", (
        negative.text
    )
    # An expired presence is listed only when asked for, as suspect.
    async with h.bbs.store.read() as tx:
        record = await tx.get_cell("c1")
    assert (record.to_wire(record.expires_at)["state"], record.to_wire(record.expires_at + 1)["state"]) == (
        "present", "suspect")
    assert [
        c["cell_id"] for c in (await h.http.get("/v1/cells", params={"all": "true"})).json()["items"]
    ] == ["c1", "c2"]


async def test_cordon_keeps_what_runs_and_survives_heartbeats(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 1)
    await h.lifecycle("c1", claimed=[ref(0, "a")], running=[running(0, "a")])
    published: list[dict[str, Any]] = []
    h.bbs.hub.add_sink(published.extend)
    cordoned = await h.http.post("/v1/cells/c1/cordon")
    assert cordoned.status_code == 200, cordoned.text
    assert (cordoned.json()["cordoned"], cordoned.json()["draining"]) == (True, False)
    assert [(e["type"], e["data"]) for e in published] == [("cell_changed", cordoned.json())], published
    assert await h.heartbeat("c1", boot_id="b1") == ["c1"], "the rep learns it from each heartbeat's answer"
    assert await h.heartbeat("c1", boot_id="b1") == ["c1"]
    assert (await h.http.get("/v1/cells")).json()["items"][0]["cordoned"] is True
    assert [(a["presence"], a["state"]) for a in await h.actuals()] == [("ORDINARY", "RUNNING")]
    assert (await h.http.post("/v1/cells/c1/uncordon")).json()["cordoned"] is False
    assert await h.heartbeat("c1", boot_id="b1") == []
    await h.settle()
    assert h.rec.to("http://c1.rep/cordon") == [
        {"cells": [{"cell_id": "c1", "cordoned": True}]},
        {"cells": [{"cell_id": "c1", "cordoned": False}]},
    ], "told its rep"
    assert (await h.http.post("/v1/cells/nope/cordon")).status_code == 404
    assert (await h.http.post("/v1/cells/c1/reboot")).status_code in (404, 405)


async def test_drain_replaces_make_before_break_and_uncordon_keeps_what_found_no_room(h: Harness) -> None:
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    await desire(h, 2)
    await h.lifecycle("c1", claimed=[ref(0, "a"), ref(1, "b")], running=[running(0, "a")])  # 1 starting
    drained = await h.http.post("/v1/cells/c1/drain")
    assert (drained.json()["cordoned"], drained.json()["draining"]) == (True, True), drained.text
    rows = sorted((a["index"], a["presence"], a["state"]) for a in await h.actuals())
    assert rows == [(0, "EVACUATING", "RUNNING"), (0, "ORDINARY", "UNCLAIMED"), (1, "ORDINARY", "CLAIMED")]
    await h.settle()
    assert h.rec.to(AUCTIONEER + "/v1/lrps")[-1][0]["indices"] == [0]
    assert h.rec.stopped() == [], "nothing stops before its replacement runs"
    # What was starting runs by the next heartbeat, which moves it too (a heartbeat that does not say
    # `evacuating`: the drain is the BBS's, not the rep's).
    await h.lifecycle("c1", running=[running(1, "b")])
    assert await h.heartbeat("c1") == ["c1"]
    rows = sorted((a["index"], a["presence"], a["state"]) for a in await h.actuals())
    assert rows == [(0, "EVACUATING", "RUNNING"), (0, "ORDINARY", "UNCLAIMED"),
                    (1, "EVACUATING", "RUNNING"), (1, "ORDINARY", "UNCLAIMED")]
    await h.lifecycle("c2", claimed=[ref(0, "a2")], running=[running(0, "a2")])
    await h.settle()
    assert h.rec.stopped() == [("c1", "a")], "the old instance stops once its replacement runs"
    # Index 1 found no room elsewhere: uncordon ends the drain, and it stays where it runs.
    assert (await h.http.post("/v1/cells/c1/uncordon")).json()["draining"] is False
    rows = sorted((a["index"], a["presence"], a["state"], a["cell_id"]) for a in await h.actuals())
    assert rows == [(0, "ORDINARY", "RUNNING", "c2"), (1, "ORDINARY", "RUNNING", "c1")]
    assert await h.heartbeat("c1") == []
    assert len(await h.actuals()) == 2, "an uncordoned cell's heartbeat moves nothing"


async def test_expired_cell_suspect_then_promoted_back_when_it_returns(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 1)
    await h.lifecycle("c1", claimed=[ref(0, "a")], running=[running(0, "a")])
    await h.bbs.convergence.run_pass(time.time() + 11)  # c1's presence has expired by then
    rows = sorted((a["presence"], a["state"]) for a in await h.actuals())
    assert rows == [("ORDINARY", "UNCLAIMED"), ("SUSPECT", "RUNNING")]
    await h.heartbeat("c1")  # back before the replacement ran...
    await h.bbs.convergence.run_pass()  # ...but its rep does not answer /state yet: undecided
    assert len(await h.actuals()) == 2
    h.rec.holdings["http://c1.rep"] = ["a"]  # it still runs the instance: promoted back
    await h.bbs.convergence.run_pass()
    assert [(a["presence"], a["state"], a["instance_guid"]) for a in await h.actuals()] == [
        ("ORDINARY", "RUNNING", "a")
    ]


async def test_a_cell_returning_without_its_instances_keeps_the_replacements(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 1)
    await h.lifecycle("c1", claimed=[ref(0, "a")], running=[running(0, "a")])
    await h.bbs.convergence.run_pass(time.time() + 11)
    await h.heartbeat("c1")
    h.rec.holdings["http://c1.rep"] = []  # its rep restarted and lost the instance
    await h.bbs.convergence.run_pass()
    assert [(a["presence"], a["state"]) for a in await h.actuals()] == [("ORDINARY", "UNCLAIMED")]
    # A late `running` about the lost instance is refused: the rep stops it.
    assert (await h.lifecycle("c1", running=[running(0, "a")]))["refused"] == [ref(0, "a")]


async def test_a_report_whose_client_left_while_it_queued_is_not_applied(h: Harness) -> None:
    """Under load a rep's report can wait longer than the rep does; the rep sends it again, so the
    copy nobody waits for must not be applied as well (it answers 499, which nobody reads)."""
    import asyncio
    import json

    await h.heartbeat("c1")
    await desire(h, 2)
    app = create_app(h.bbs, insecure=True)
    left = asyncio.Event()

    async def call(path: str, report: dict[str, Any], gone: asyncio.Event | None) -> list[dict[str, Any]]:
        body, sent, messages = json.dumps(report).encode(), False, []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await (gone or asyncio.Event()).wait()  # None: a client that stays
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)

        scope = {"type": "http", "http_version": "1.1", "method": "POST", "scheme": "http", "path": path,
                 "raw_path": path.encode(), "root_path": "", "query_string": b"", "server": ("bbs", 80),
                 "client": ("rep", 1), "headers": [(b"content-type", b"application/json")]}
        await app(scope, receive, send)
        return messages

    batcher = h.bbs.actual_lrps._batcher  # (private: the only way to see a report queued behind a batch)
    async with h.bbs.store.write():  # the first report's batch waits for this lock; the second queues
        first = asyncio.create_task(
            call("/v1/lifecycle", {"cells": {"c1": {"claimed": [ref(0, "a")]}}}, None)
        )

        def queued() -> str:
            return f"queue holds {len(batcher._queue)}"

        await eventually(lambda: batcher._worker is not None and not batcher._queue, 5.0,
                         "the first report's batch running", queued)
        second = asyncio.create_task(
            call("/v1/lifecycle", {"cells": {"c1": {"claimed": [ref(1, "b")]}}}, left)
        )
        await eventually(lambda: len(batcher._queue) == 1, 5.0,
                         "the second report queued behind the first batch", queued)
        left.set()
        gone = await asyncio.wait_for(second, 5)
    done = await asyncio.wait_for(first, 5)
    assert [m["status"] for m in gone if m["type"] == "http.response.start"] == [499]
    assert [m["status"] for m in done if m["type"] == "http.response.start"] == [200]
    states = {a["index"]: a["state"] for a in await h.actuals()}
    assert states == {0: "CLAIMED", 1: "UNCLAIMED"}, f"the abandoned claim was applied: {states}"


# --- cell loss, removal and late claims (bbs/cell_loss.py, bbs/placements.py) ----------------------------


async def test_on_cell_loss_is_validated_kept_and_changed_without_touching_instances(h: Harness) -> None:
    bad = await h.http.post("/v1/desired_lrps", json={"process_guid": "db", "on_cell_loss": "sometimes",
                                                      "command": ["true"]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "on_cell_loss"], bad.text
    created = await h.http.post("/v1/desired_lrps", json={"process_guid": "db", "instances": 2,
                                                          "on_cell_loss": "keep-replicas",
                                                          "command": ["true"]})
    assert created.status_code == 201 and created.json()["on_cell_loss"] == "keep-replicas", created.text
    listed = (await h.http.get("/v1/desired_lrps")).json()["items"]
    assert [d["on_cell_loss"] for d in listed] == ["keep-replicas"]
    assert (await desire(h, 1, pg="web"))["on_cell_loss"] == "reschedule"  # Diego's, by default
    await h.settle()
    sent = len(h.rec.sent)
    patched = await h.http.patch("/v1/desired_lrps/db", json={"on_cell_loss": "reschedule"})
    assert patched.status_code == 200, patched.text
    body = patched.json()["desired_lrp"]
    assert (body["on_cell_loss"], body["instances"]) == ("reschedule", 2)
    assert body["modification_tag"]["index"] == 1
    await h.settle()
    assert len(h.rec.sent) == sent, "a policy change neither auctions nor stops anything"
    assert len(await h.actuals(process_guid="db")) == 2
    refused = await h.http.patch("/v1/desired_lrps/db", json={"on_cell_loss": "never"})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "on_cell_loss"]


async def test_exec_enabled_is_set_on_create_and_toggled_without_a_version(h: Harness) -> None:
    created = await h.http.post("/v1/desired_lrps", json={"process_guid": "db", "instances": 2,
                                                          "exec_enabled": False, "command": ["true"]})
    assert created.status_code == 201 and created.json()["exec_enabled"] is False, created.text
    assert (await desire(h, 1, pg="web"))["exec_enabled"] is True  # allowed by default
    await h.settle()
    sent = len(h.rec.sent)
    patched = await h.http.patch("/v1/desired_lrps/db", json={"exec_enabled": True})
    assert patched.status_code == 200, patched.text
    answer = patched.json()
    assert answer["desired_lrp"]["exec_enabled"] is True and answer["desired_lrp"]["version"] == 1, answer
    assert answer["new_version"] is False and answer["rollout"] is None, answer
    await h.settle()
    assert len(h.rec.sent) == sent, "toggling exec neither auctions nor stops anything"
    assert (await h.http.get("/v1/desired_lrps/db")).json()["exec_enabled"] is True
    # A new definition keeps it; a bad value changes nothing.
    replaced = await h.http.patch("/v1/desired_lrps/db", json={"command": ["sleep", "1"]})
    assert replaced.json()["desired_lrp"]["exec_enabled"] is True and replaced.json()["new_version"] is True
    refused = await h.http.patch("/v1/desired_lrps/db", json={"exec_enabled": "sometimes"})
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "exec_enabled"]


async def expire(h: Harness, cell_id: str) -> None:
    """The cell's presence expired (as if it had stopped heartbeating a TTL ago)."""
    async with h.bbs.store.write() as tx:
        cell = await tx.get_cell(cell_id)
        assert cell is not None
        await tx.put_cells([dataclasses.replace(cell, expires_at=time.time() - 1.0)], [])


async def test_removing_a_lost_cell_places_again_everything_it_held(h: Harness) -> None:
    await h.heartbeat("c1")
    await h.heartbeat("c2")
    created = await h.http.post("/v1/desired_lrps", json={"process_guid": "web", "instances": 2,
                                                          "on_cell_loss": "keep-replicas",
                                                          "command": ["true"]})
    assert created.status_code == 201
    await h.lifecycle("c1", claimed=[ref(0, "a")], running=[running(0, "a")])
    await h.lifecycle("c2", claimed=[ref(1, "b")], running=[running(1, "b")])
    present = await h.http.delete("/v1/cells/c1")
    assert present.status_code == 409 and "is present" in present.json()["detail"], present.text
    await expire(h, "c1")
    await h.bbs.convergence.run_pass()
    # keep-replicas, two instances: index 0 stays on the lost cell, SUSPECT (still RUNNING), unreplaced.
    rows = sorted((a["index"], a["presence"], a["state"], a["cell_id"]) for a in await h.actuals())
    assert rows == [(0, "SUSPECT", "RUNNING", "c1"), (1, "ORDINARY", "RUNNING", "c2")]
    await h.settle()
    auctions = len(h.rec.to(AUCTIONEER + "/v1/lrps"))

    assert (await h.http.delete("/v1/cells/c1")).status_code == 204
    await h.bbs.convergence.run_pass()  # the pass the removal wakes
    rows = sorted((a["index"], a["presence"], a["state"], a["cell_id"]) for a in await h.actuals())
    assert rows == [(0, "ORDINARY", "UNCLAIMED", ""), (1, "ORDINARY", "RUNNING", "c2")]
    await h.settle()
    new = h.rec.to(AUCTIONEER + "/v1/lrps")[auctions:]
    assert [[s["indices"] for s in batch] for batch in new] == [[[0]]]
    assert [c["cell_id"] for c in (await h.http.get("/v1/cells")).json()["items"]] == ["c2"]
    assert (await h.http.delete("/v1/cells/c1")).status_code == 404


async def report_accepted(h: Harness, cell_id: str, lrps: str = "", tasks: str = "") -> None:
    report = {"accepted": {cell_id: {"lrps": lrps, "tasks": tasks}}, "fencing_token": 0}
    response = await h.http.post("/v1/placement_failures", json=report)
    assert response.status_code == 204, response.text


async def test_an_accepted_instance_whose_claim_is_late_is_not_auctioned_again_while_its_cell_holds_it(
    h: Harness,
) -> None:
    h.bbs.convergence.config = dataclasses.replace(h.bbs.convergence.config, stale_unclaimed=0.5)
    await h.heartbeat("c1")
    await desire(h, 1)
    await report_accepted(h, "c1", lrps="web:0")  # the auctioneer placed it on c1; c1's claim is slow
    h.rec.holdings["http://c1.rep"] = ["g"]  # c1's rep holds web/0
    stale = time.time() + 1.0  # past the 0.5 s staleness limit; c1 is present (TTL 10 s)

    async def probed_after(t: float) -> float:
        def probe_after() -> float:
            probe = h.bbs.convergence.probes.latest().get("c1")
            return expect(probe is not None and probe.started_at > t and probe.started_at, f"probe {probe}")

        return await eventually(probe_after, 10.0, f"c1 probed after {t}")

    await h.bbs.convergence.run_pass(stale)  # nothing heard from c1 since it accepted: asked, not auctioned
    first = await probed_after(0.0)
    await h.bbs.convergence.run_pass(stale)  # c1 says it holds it: still not auctioned
    await h.settle()
    assert len(h.rec.to(AUCTIONEER + "/v1/lrps")) == 1, "the instance c1 accepted was auctioned a second time"
    assert [(a["state"], a["presence"]) for a in await h.actuals()] == [("UNCLAIMED", "ORDINARY")]

    h.rec.holdings["http://c1.rep"] = []  # c1's rep restarted: it no longer holds web/0
    await probed_after(first)
    await h.bbs.convergence.run_pass(stale + 1.0)
    await h.settle()
    assert [s["indices"] for s in h.rec.to(AUCTIONEER + "/v1/lrps")[-1]] == [[0]]


async def test_accepted_work_is_forgotten_once_claimed_and_a_bad_report_is_422(h: Harness) -> None:
    await h.heartbeat("c1")
    await desire(h, 2)
    await desire(h, 1, pg="api")  # stays UNCLAIMED: a report must be taken apart to see what it names
    await report_accepted(h, "c1", lrps="web:0 web:1")
    await h.lifecycle("c1", claimed=[ref(0, "a"), ref(1, "b")])
    async with h.bbs.store.read() as tx:
        assert len(await tx.placement_times()) == 1
    await h.bbs.convergence.run_pass(time.time() + 5)  # younger than the staleness limit: not looked at
    async with h.bbs.store.read() as tx:
        assert len(await tx.placement_times()) == 1
    await h.bbs.convergence.run_pass(time.time() + 31)  # web's claims are in: the report goes
    async with h.bbs.store.read() as tx:
        assert await tx.placement_times() == []
    await report_accepted(h, "c1", lrps="api:0")
    await h.lifecycle("c1", claimed=[ref(0, "c", pg="api")])
    await h.bbs.convergence.run_pass(time.time() + 31)  # nothing UNCLAIMED: the report goes unread
    async with h.bbs.store.read() as tx:
        assert await tx.placement_times() == []
    for accepted, name in (({"c1": {"lrps": "web 0"}}, "lrps"), ({"c1": {"tasks": "a  b"}}, "tasks")):
        response = await h.http.post("/v1/placement_failures", json={"accepted": accepted})
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == [
            "body", "accepted", "c1", name], response.text
    async with h.bbs.store.read() as tx:
        assert await tx.placement_times() == []


async def test_an_auction_report_is_published_and_its_explanations_served(h: Harness) -> None:
    published: list[list[dict[str, Any]]] = []
    h.bbs.hub.add_sink(published.append)
    placed = {"process_guid": "web", "index": 0, "placed": True, "cell_id": "cell-1", "strategy": "diego",
              "candidates": [{"cell_id": "cell-1", "zone": "z1", "zone_index": 0, "chosen": True,
                              "components": {"memory_used": 0.25, "score": 0.3}},
                             {"cell_id": "cell-2", "zone": "z1", "zone_index": 1,
                              "components": {"memory_used": 0.5, "score": 0.6}}],
              "decided_by": "score"}
    unplaced = {"process_guid": "web", "index": 1, "placed": False, "error": "insufficient resources: memory",
                "detail": "0/2 cells fit: 2 insufficient memory (largest free 64 MB, need 128)"}
    report = {"duration_s": 0.25, "fetch_states_s": 0.05, "lrps_placed": 1, "lrps_failed": 1,
              "finished_at": 1_700_000_000.0, "explanations": [placed, unplaced]}
    assert (await h.http.post("/v1/auctions", json=report)).status_code == 204

    [[event]] = [batch for batch in published if batch[0]["type"] == "auction_completed"]
    assert event["data"] == {"duration_s": 0.25, "fetch_states_s": 0.05, "lrps_placed": 1, "lrps_failed": 1,
                             "tasks_placed": 0, "tasks_failed": 0}
    why = (await h.http.get("/v1/actual_lrps/web/0/placement")).json()
    assert (why["cell_id"], why["decided_by"], why["auctioned_at"]) == ("cell-1", "score", 1_700_000_000.0)
    assert [c["cell_id"] for c in why["candidates"]] == ["cell-1", "cell-2"]
    why = (await h.http.get("/v1/actual_lrps/web/1/placement")).json()
    assert (why["placed"], why["detail"]) == (False, unplaced["detail"])
    missing = await h.http.get("/v1/actual_lrps/web/2/placement")
    assert missing.status_code == 404 and "web/2" in missing.json()["detail"], missing.text
    bad = await h.http.post("/v1/auctions", json={**report, "duration_s": -1})
    assert bad.status_code == 422 and "duration_s" in bad.text, bad.text


async def test_an_unexplained_instance_falls_back_to_its_stored_placement_error(h: Harness) -> None:
    await desire(h, 1)
    failure = {"lrps": [{"process_guid": "web", "index": 0, "error": "insufficient resources: memory",
                         "detail": "0/1 cells fit: 1 insufficient memory (largest free 64 MB, need 128)"}]}
    assert (await h.http.post("/v1/placement_failures", json=failure)).status_code == 204
    why = (await h.http.get("/v1/actual_lrps/web/0/placement")).json()
    assert (why["placed"], why["source"], why["error"], why["detail"]) == (
        False, "placement_error", "insufficient resources: memory", failure["lrps"][0]["detail"])


async def test_an_auction_report_under_a_stale_fencing_token_is_refused_and_counted_as_fenced(
    h: Harness,
) -> None:
    """Both kinds of auction report (with failures or accepted work, and a bare summary) go through the one
    fence check: a 409 counted as a `fenced` refusal and a stale write, nothing applied."""
    first = (await h.http.post("/v1/leases/auctioneer", json={"owner": "a", "ttl_s": 30})).json()
    released = await h.http.delete("/v1/leases/auctioneer", params={"owner": "a", "token": first["token"]})
    assert released.status_code == 204, released.text
    await h.http.post("/v1/leases/auctioneer", json={"owner": "b", "ttl_s": 30})
    summary = {"fencing_token": first["token"], "duration_s": 0.1, "fetch_states_s": 0.01, "lrps_placed": 1}
    with_failures = {**summary, "tasks": [{"task_guid": "t1", "error": "insufficient resources"}]}
    published: list[dict[str, Any]] = []
    h.bbs.hub.add_sink(published.extend)
    for report, writes in ((summary, "auctions"), (with_failures, "placement_failures")):
        refused = await h.http.post("/v1/auctions", json=report)
        assert refused.status_code == 409 and "older" in refused.json()["detail"], refused.text
        metrics = (await h.http.get("/metrics")).text
        assert f'vendue_bbs_stale_writes_total{{kind="{writes}"}} 1.0' in metrics, metrics
    assert 'vendue_refused_requests_total{reason="fenced"} 2.0' in metrics, metrics
    assert not any(e["type"] == "auction_completed" for e in published), "a stale report was applied"
