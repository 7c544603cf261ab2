"""The host-level routes of a multi-cell rep (GET /state, POST /work at the root), in-process over ASGI."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import httpx
import pytest

from common.models import (
    CellPresence,
    DesiredLRP,
    HostCellStates,
    HostWorkResult,
    LifecycleResult,
    ModificationTag,
    Work,
    WorkResult,
)

from .api import create_app
from .cell import Cell, CellConfig
from .cell_test import RecordingExecutor
from .host import RepHost
from .reports import Reports

NOW = datetime(2024, 1, 1, tzinfo=UTC)


async def unsent(batch: Reports) -> LifecycleResult:
    raise AssertionError("these tests do not flush outboxes")


def desired(guid: str, memory_mb: int = 256) -> DesiredLRP:
    return DesiredLRP(process_guid=guid, memory_mb=memory_mb, created_at=NOW, modification_tag=ModificationTag(epoch="e"))


def make_host(cell_ids: list[str], memory_mb: int = 4096) -> tuple[RepHost, RecordingExecutor]:
    executor = RecordingExecutor()
    cells = [
        Cell(
            CellConfig(cell_id=cid, zone="z0", rep_url=f"http://rep/cells/{cid}", host="127.0.0.1", memory_mb=memory_mb,
                       disk_mb=65536, containers=250, stacks=("cflinuxfs4",), host_url="http://rep"),
            executor, unsent,
        )
        for cid in cell_ids
    ]
    return RepHost(cells, [executor], httpx.AsyncClient(), "http://bbs.test"), executor


@pytest.fixture
async def rep() -> AsyncIterator[tuple[RepHost, RecordingExecutor, httpx.AsyncClient]]:
    host, executor = make_host(["c0", "c1", "c2", "c3"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(host)), base_url="http://rep") as client:
        yield host, executor, client


def host_body(cells: dict[str, list[tuple[int, list[int]]]], apps: list[DesiredLRP], fencing_token: int = 0) -> dict:
    return {
        "desired": [d.model_dump(mode="json") for d in apps],
        "cells": {cid: {"lrp_groups": [{"desired": d, "indices": ix} for d, ix in groups], "tasks": []}
                  for cid, groups in cells.items()},
        "fencing_token": fencing_token,
    }


async def test_host_state_answers_every_live_cell_in_one_request(rep) -> None:
    host, _, client = rep
    host.cells["c0"].accept(Work(lrp_groups=[{"desired": desired("web"), "indices": [0, 1]}]))
    host.cells["c3"].retired = True

    everyone = HostCellStates.model_validate_json((await client.get("/state")).content)
    assert [s.cell_id for s in everyone.cells] == ["c0", "c1", "c2"], "a retired cell is not bid"
    assert everyone.cells[0].lrp_counts == {"web": 2} and everyone.cells[0].lrps == [], "the counts form by default"
    assert everyone.cells[0].model_dump() == host.cells["c0"].state(counts=True).model_dump()

    some = HostCellStates.model_validate_json((await client.get("/state", params={"cells": "c1,c3,nope"})).content)
    assert [s.cell_id for s in some.cells] == ["c1"]


async def test_host_work_places_each_cells_part_and_answers_each_cells_result(rep) -> None:
    host, executor, client = rep
    web, api = desired("web"), desired("api", memory_mb=3000)
    host.cells["c1"].accept(Work(fencing_token=7))  # c1 has seen token 7: older work is refused
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
    assert [r.index for r in results["c1"].rejected_lrps] == [2] and results["c1"].reason == "stale fencing token 5 < 7"
    assert results["c2"].reason == "cell is evacuating"
    started = sorted((c.cell_id, c.process_guid, c.index) for c in executor.started)
    assert started == [("c0", "api", 0), ("c0", "web", 0), ("c0", "web", 1)]
    assert host.cells["c0"].fencing_token == 5 and host.cells["c0"].accepted_fencing_tokens == [5]


async def test_each_cells_part_means_what_its_own_post_means(rep) -> None:
    """The same work through POST /work at the root and through each cell's POST {rep_url}/work, on two
    identical hosts, leaves the same cells holding the same instances and answers the same results."""
    _, executor, client = rep
    twin, twin_executor = make_host(["c0", "c1", "c2", "c3"])
    web, api = desired("web", memory_mb=1500), desired("api", memory_mb=1000)
    parts = {"c0": [(0, [0, 1, 2]), (1, [0])], "c1": [(1, [1, 2])], "c3": [(0, [3]), (1, [0])]}

    host_results = HostWorkResult.model_validate_json(
        (await client.post("/work", json=host_body(parts, [web, api]))).content).cells
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(twin)), base_url="http://rep") as own:
        for cell_id, groups in parts.items():
            work = {"lrp_groups": [{"desired": [web, api][d].model_dump(mode="json"), "indices": ix} for d, ix in groups]}
            answer = WorkResult.model_validate_json((await own.post(f"/cells/{cell_id}/work", json=work)).content)
            assert answer.model_dump() == host_results[cell_id].model_dump(), cell_id

    def placed(ex: RecordingExecutor) -> list[tuple[str, str, int]]:
        return sorted((c.cell_id, c.process_guid, c.index) for c in ex.started)

    assert placed(executor) == placed(twin_executor) and len(placed(executor)) == 7


async def test_each_desired_lrp_is_validated_once_per_request(rep) -> None:
    host, _, client = rep
    body = host_body({cid: [(0, [i])] for i, cid in enumerate(["c0", "c1", "c2", "c3"])}, [desired("web")])
    await client.post("/work", json=body)
    held = [next(iter(host.cells[cid]._instances.values())).desired for cid in ("c0", "c1", "c2", "c3")]
    assert all(d is held[0] for d in held), "the four cells share the one DesiredLRP parsed from the body"


@pytest.mark.parametrize(("body", "loc", "says"), [
    ({"desired": []}, ["body", "cells"], "Field required"),
    ({"cells": {"c0": {"lrp_groups": [{"desired": 1, "indices": [0]}]}}, "desired": []}, ["body"],
     "cells.c0.lrp_groups.0.desired: 1 names no entry of `desired` (0 entries)"),
    ({"cells": {"c0": {"lrp_groups": [{"desired": -1, "indices": [0]}]}}}, ["body", "cells", "c0", "lrp_groups", 0,
                                                                              "desired"], "greater than or equal"),
])
async def test_a_bad_host_work_body_is_a_422_naming_the_field(rep, body, loc, says) -> None:
    host, executor, client = rep
    response = await client.post("/work", content=json.dumps(body), headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"] == loc and says in e["msg"] for e in errors), errors
    assert executor.started == []


def test_a_multi_cell_host_names_itself_in_each_presence_and_a_single_cell_rep_does_not() -> None:
    host, _ = make_host(["c0", "c1"])
    assert {c.presence().host_url for c in host.cells.values()} == {"http://rep"}
    single = Cell(CellConfig(cell_id="solo", zone="z0", rep_url="http://solo", host="h", memory_mb=1, disk_mb=1,
                             containers=1, stacks=("cflinuxfs4",)), RecordingExecutor(), unsent)
    assert single.presence().host_url == ""
    # It travels through the BBS's JSON and back.
    assert CellPresence.model_validate_json(host.cells["c0"].presence().model_dump_json()).host_url == "http://rep"
