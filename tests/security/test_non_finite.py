"""NaN, Infinity and 1e999 (Python's JSON reader takes all three) in a body, over real HTTP: a 422 naming the
field, and the keep-alive connection serves the next request. Heartbeat host metrics are bounded, so what
GET /v1/cells serves stays JSON."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from bbs.api import create_app
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from tests.security.apps import auctioneer_app
from tests.support.bbs_harness import AUCTIONEER, Recorder
from tests.support.polling import eventually

WAIT_S = 20
CELL = {"cell_id": "cell-1", "zone": "z1", "rep_url": "http://127.0.0.1:1",
        "total": {"memory_mb": 4096, "disk_mb": 8192, "containers": 100}}
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999"]


@asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="off"))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or serving.done(), WAIT_S, "the server serving",
                         lambda: serving)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S) as client:
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, WAIT_S)


@pytest.fixture
async def bbs_http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = BBSSettings(data_dir=tmp_path, auctioneer_url=AUCTIONEER, send_attempts=1, lease_ttl=1)
    outbound = httpx.AsyncClient(transport=httpx.MockTransport(Recorder().handle), timeout=5)
    async with running_bbs(settings, converge=False, client=outbound) as bbs, \
            served(create_app(bbs, insecure=True)) as client:
        yield client


def local_address(response: httpx.Response) -> Any:
    return response.extensions["network_stream"].get_extra_info("client_addr")


async def refused_on_one_connection(
    http: httpx.AsyncClient, path: str, body: str, field: str, method: str = "POST"
) -> None:
    response = await http.request(method, path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert any(field in error["loc"] and error["msg"] for error in detail), detail
    following = await http.get("/ping") if path == "/v1/lrps" else await http.get("/v1/cells")
    assert following.status_code < 500
    assert local_address(following) == local_address(response), "expected the connection kept"


@pytest.mark.parametrize("value", NON_FINITE)
async def test_a_non_finite_number_in_a_bbs_body_is_a_422_on_the_same_connection(
    bbs_http: httpx.AsyncClient, value: str
) -> None:
    lrp = f'{{"process_guid": "web", "instances": {value}, "command": ["true"]}}'
    await refused_on_one_connection(bbs_http, "/v1/desired_lrps", lrp, "instances")
    heartbeat = json.dumps({"cells": [{**CELL, "host": {"load5": 0.5}}]}).replace("0.5", value)
    await refused_on_one_connection(bbs_http, "/v1/cells", heartbeat, "load5", method="PUT")


@pytest.mark.parametrize("host", [
    {"cores": 2**63}, {"cores": 0}, {"cores": -1}, {"cores": 4097},
    {"load5": 1e308}, {"load5": -1.0}, {"mem_used_mb": 1e9}, {"disk_total_mb": -5.0},
])
async def test_heartbeat_host_metrics_are_bounded(bbs_http: httpx.AsyncClient, host: dict[str, Any]) -> None:
    response = await bbs_http.put("/v1/cells", json={"cells": [{**CELL, "host": host}]})
    assert response.status_code == 422, response.text
    assert any(next(iter(host)) in error["loc"] for error in response.json()["detail"])
    cells = await bbs_http.get("/v1/cells")
    assert cells.status_code == 200
    json.loads(cells.text, parse_constant=lambda c: pytest.fail(f"GET /v1/cells served {c}"))
    good = {"cores": 4096, "load5": 3.5, "mem_used_mb": 2048.0}
    ok = await bbs_http.put("/v1/cells", json={"cells": [{**CELL, "host": good}]})
    assert ok.status_code < 300, ok.text
    assert (await bbs_http.get("/v1/cells")).json()["items"][0]["host"]["cores"] == 4096


@pytest.mark.parametrize("value", NON_FINITE)
async def test_a_non_finite_number_in_an_auctioneer_body_is_a_422_on_the_same_connection(value: str) -> None:
    desired = '{"process_guid": "web", "instances": 1, "command": ["true"]}'
    body = f'[{{"desired": {desired}, "indices": [{value}]}}]'
    async with served(auctioneer_app()) as http:
        await refused_on_one_connection(http, "/v1/lrps", body, "indices")
