"""The one rep API (every route at the root, the bodies naming the cells), in-process over ASGI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from common.models import (
    CellPresence,
    DesiredLRP,
    Found,
    HostCellDetails,
    HostCellStates,
    HostWorkResult,
    Task,
)
from tests.support.recording_executor import RecordingExecutor
from tests.support.rep_host import LEASE_TOKEN, NOW, answer_outbox, app_of, desired, make_host

from .host import RepHost


@pytest.fixture
async def rep(tmp_path) -> AsyncIterator[tuple[RepHost, RecordingExecutor, httpx.AsyncClient]]:
    host, executor = make_host(["c0", "c1", "c2", "c3"])
    async with app_of(host, tmp_path) as client:
        yield host, executor, client


def host_body(
    cells: dict[str, list[tuple[int, list[int]]]], apps: list[DesiredLRP], fencing_token: int = LEASE_TOKEN
) -> dict:
    return {
        "desired": [d.model_dump(mode="json") for d in apps],
        "cells": {cid: {"lrp_groups": [{"desired": d, "indices": ix} for d, ix in groups], "tasks": []}
                  for cid, groups in cells.items()},
        "fencing_token": fencing_token,
    }


def task(guid: str) -> Task:
    return Task(task_guid=guid, command=["true"], created_at=NOW, updated_at=NOW)


async def test_state_answers_every_live_cell_in_one_request(rep) -> None:
    host, _, client = rep
    web = desired("web")
    host.cells["c0"].take([(web, 0), (web, 1)], [], 0)
    host.cells["c3"].retired = True

    everyone = (await client.get("/state")).json()
    assert [s["cell_id"] for s in everyone["cells"]] == ["c0", "c1", "c2"], "a retired cell is not bid"
    assert everyone["cells"][0] == host.cells["c0"].state().model_dump(mode="json"), "the bids by default"
    assert everyone["cells"][0]["lrp_counts"] == {"web": 2} and "lrps" not in everyone["cells"][0]

    some = HostCellStates.model_validate_json(
        (await client.get("/state", params={"cells": "c1,c3,nope"})).content
    )
    assert [s.cell_id for s in some.cells] == ["c1"]

    full = HostCellDetails.model_validate_json((await client.get("/state?lrps=full&cells=c0")).content)
    [c0] = full.cells
    assert c0.bid == host.cells["c0"].state(), "the same bid, in detail"
    assert [(lrp.process_guid, lrp.index) for lrp in c0.lrps] == [("web", 0), ("web", 1)]
    assert (c0.rep_url, c0.isolation) == (host.cells["c0"].config.rep_url, host.cells["c0"].config.isolation)
    bad = await client.get("/state?lrps=all")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "lrps"], bad.text


async def test_work_places_each_cells_part_and_answers_each_cells_result(rep) -> None:
    host, executor, client = rep
    web, api = desired("web"), desired("api", memory_mb=3000)
    host.cells["c1"].take([], [], 7)  # c1 took work under token 7: older work is refused by the cell too
    host.cells["c2"].evacuating = True
    body = host_body({
        "c0": [(0, [0, 1]), (1, [0, 1])],  # api needs 3000 MB per instance: only one fits on c0
        "c1": [(0, [2])],
        "c2": [(0, [3])],
        "elsewhere": [(0, [4])],  # not hosted here
    }, [web, api], fencing_token=5)

    response = await client.post("/work", json=body)

    assert response.status_code == 200, response.text
    results = HostWorkResult.model_validate_json(response.content).cells
    assert set(results) == {"c0", "c1", "c2"}, "a cell not hosted here is left out: none of its work taken"
    assert [(r.desired.process_guid, r.index) for r in results["c0"].rejected_lrps] == [("api", 1)]
    assert results["c0"].reason == "insufficient resources: memory"
    assert [r.index for r in results["c1"].rejected_lrps] == [2] and results[
        "c1"
    ].reason == "stale fencing token 5 < 7"
    assert results["c2"].reason == "cell is evacuating"
    assert executor.started == [], "nothing starts before the BBS accepted its claim"
    for cell in host.cells.values():
        answer_outbox(cell)
    started = sorted((c.cell_id, c.process_guid, c.index) for c in executor.started)
    assert started == [("c0", "api", 0), ("c0", "web", 0), ("c0", "web", 1)]
    assert host.cells["c0"].fencing_token == 5 and host.cells["c0"].accepted_fencing_tokens == [5]


async def test_a_one_cell_rep_serves_the_same_api(tmp_path) -> None:
    host, executor = make_host(["solo"])
    async with app_of(host, tmp_path) as client:
        answer = await client.post("/work", json=host_body({"solo": [(0, [0, 1])]}, [desired("web")]))
        assert HostWorkResult.model_validate_json(answer.content).cells["solo"].rejected_lrps == []
        states = HostCellStates.model_validate_json((await client.get("/state")).content).cells
        assert [(s.cell_id, s.lrp_counts) for s in states] == [("solo", {"web": 2})]
        assert (await client.get("/cells/solo/state")).status_code == 404, "no per-cell routes"
    answer_outbox(host.cells["solo"])
    assert sorted(c.index for c in executor.started) == [0, 1]


async def test_stop_and_cancel_take_batches_and_answer_what_was_found(rep) -> None:
    host, executor, client = rep
    web = desired("web")
    host.cells["c0"].take([(web, 0)], [task("t0")], 0)
    host.cells["c1"].take([(web, 1)], [task("t1")], 0)
    guid = {c: next(iter(host.cells[c]._instances)) for c in ("c0", "c1")}

    stops = [{"cell_id": "c0", "process_guid": "web", "instance_guid": guid["c0"]},
             {"cell_id": "c1", "process_guid": "web", "instance_guid": guid["c0"]},  # not on c1
             {"cell_id": "c1", "process_guid": "web", "instance_guid": guid["c1"]},
             {"cell_id": "elsewhere", "process_guid": "web", "instance_guid": "x"}]
    response = await client.post("/stop", json={"instances": stops})
    assert response.status_code == 202, response.text
    assert Found.model_validate_json(response.content).found == [guid["c0"], guid["c1"]]

    cancels = [{"cell_id": "c1", "task_guid": "t1"}, {"cell_id": "c1", "task_guid": "t0"}]
    response = await client.post("/cancel", json={"tasks": cancels})
    assert response.status_code == 202 and Found.model_validate_json(response.content).found == ["t1"]
    for cell in (host.cells["c0"], host.cells["c1"]):
        await cell.wait_background(5)
    assert not host.cells["c0"]._instances and not host.cells["c1"]._instances
    assert list(host.cells["c0"]._tasks) == ["t0"] and not host.cells["c1"]._tasks


async def test_evacuate_names_cells_or_means_every_cell(rep) -> None:
    host, _, client = rep
    response = await client.post("/evacuate", json={"cells": ["c1", "nope"]})
    assert response.status_code == 202 and response.json() == {"evacuating": ["c1"]}
    assert [c.cell_id for c in host.cells.values() if c.evacuating] == ["c1"]
    bad = await client.post("/evacuate", json={"cells": ["no/such id"]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][:2] == ["body", "cells"], bad.text
    response = await client.post("/evacuate")
    assert response.status_code == 202 and response.json() == {"evacuating": ["c0", "c1", "c2", "c3"]}
    assert all(c.evacuating for c in host.cells.values())
    await host.close()


async def test_each_desired_lrp_is_validated_once_per_request(rep) -> None:
    host, _, client = rep
    body = host_body({cid: [(0, [i])] for i, cid in enumerate(["c0", "c1", "c2", "c3"])}, [desired("web")])
    await client.post("/work", json=body)
    held = [next(iter(host.cells[cid]._instances.values())).desired for cid in ("c0", "c1", "c2", "c3")]
    assert all(d is held[0] for d in held), "the four cells share the one DesiredLRP parsed from the body"


@pytest.mark.parametrize(
    ("body", "loc", "says"),
    [
        ({"desired": []}, ["body", "cells"], "Field required"),
        (
            {"cells": {"c0": {"lrp_groups": [{"desired": 1, "indices": [0]}]}}, "desired": []},
            ["body"],
            "cells.c0.lrp_groups.0.desired: 1 names no entry of `desired` (0 entries)",
        ),
        (
            {"cells": {"c0": {"lrp_groups": [{"desired": -1, "indices": [0]}]}}},
            ["body", "cells", "c0", "lrp_groups", 0, "desired"],
            "greater than or equal",
        ),
        ({"cells": {}, "fencing_tokn": 3}, ["body", "fencing_tokn"], "Extra inputs are not permitted"),
    ],
)
async def test_a_bad_host_work_body_is_a_422_naming_the_field(rep, body, loc, says) -> None:
    host, executor, client = rep
    response = await client.post(
        "/work", content=json.dumps(body), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"] == loc and says in e["msg"] for e in errors), errors
    assert executor.started == []


def test_every_cell_names_its_process_in_its_presence() -> None:
    host, _ = make_host(["c0", "c1"])
    assert {(c.presence().rep_url, c.presence().rep_id) for c in host.cells.values()} == {
        ("http://rep", "rep-a")
    }
    # It travels through the BBS's JSON and back.
    assert CellPresence.model_validate_json(host.cells["c0"].presence().model_dump_json()).rep_id == "rep-a"
