"""The BBS in-process behind a test client, its outside world recorded (Recorder: the auctioneer and the reps,
a mock transport): Harness, and the request bodies the API tests send."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from bbs.core import BBS

AUCTIONEER = "http://auctioneer.test"


@dataclass
class Recorder:
    """The outside world of the BBS: the auctioneer, and reps speaking the one rep API (rep/api.py)."""

    sent: list[tuple[str, Any]] = field(default_factory=list)  # (url, json body)
    auctioneer_down: bool = False
    holdings: dict[str, list[str]] = field(default_factory=dict)  # rep_url -> instance guids in its /state
    usage: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # rep_url -> its GET /usage items

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.auctioneer_down and str(request.url).startswith(AUCTIONEER):
            raise httpx.ConnectError("connection refused", request=request)
        if request.method == "GET" and request.url.path == "/state":
            rep_url = f"{request.url.scheme}://{request.url.host}"
            if rep_url not in self.holdings:
                return httpx.Response(503)
            cell_id = request.url.params["cells"]
            lrps = [
                {"process_guid": "web", "index": 0, "instance_guid": g, "memory_mb": 1, "disk_mb": 1}
                for g in self.holdings[rep_url]
            ]
            size = {"memory_mb": 1, "disk_mb": 1, "containers": 1}
            bid = {"cell_id": cell_id, "zone": "z1", "total": size, "available": size}
            return httpx.Response(200, json={"cells": [{"bid": bid, "rep_url": rep_url, "lrps": lrps}]})
        if request.method == "GET" and request.url.path == "/usage":
            rep_url = f"{request.url.scheme}://{request.url.host}"
            self.sent.append((str(request.url), None))
            if rep_url not in self.usage:
                raise httpx.ConnectError("connection refused", request=request)
            return httpx.Response(200, json={"items": self.usage[rep_url]})
        body = httpx.Response(200, content=request.content).json() if request.content else None
        self.sent.append((str(request.url), body))
        return httpx.Response(202, json={"found": []})

    def to(self, prefix: str) -> list[Any]:
        return [body for url, body in self.sent if url.startswith(prefix)]

    def stopped(self, rep_url: str = "http://c1.rep") -> list[tuple[str, str]]:
        """(cell_id, instance_guid) of every stop sent to that rep process, in its batched bodies."""
        return sorted((i["cell_id"], i["instance_guid"]) for body in self.to(f"{rep_url}/stop")
                      for i in body["instances"])

    def cancelled(self, rep_url: str = "http://c1.rep") -> list[tuple[str, str]]:
        return sorted(
            (t["cell_id"], t["task_guid"]) for body in self.to(f"{rep_url}/cancel") for t in body["tasks"]
        )


@dataclass
class Harness:
    bbs: BBS
    http: httpx.AsyncClient
    rec: Recorder

    async def settle(self) -> None:
        await self.bbs.outbound.drain(5.0)

    async def actuals(self, **params: str) -> list[dict[str, Any]]:
        response = await self.http.get("/v1/actual_lrps", params=params)
        assert response.status_code == 200, response.text
        return response.json()["items"]

    async def heartbeat(self, cell_id: str, **extra: Any) -> list[str]:
        """One cell's heartbeat; the cells the BBS answers cordoned."""
        body = {
            "cell_id": cell_id,
            "zone": "z1",
            "rep_url": f"http://{cell_id}.rep",
            "total": {"memory_mb": 4096, "disk_mb": 8192, "containers": 100},
            **extra,
        }
        response = await self.http.put("/v1/cells", json={"cells": [body]})
        assert response.status_code == 200, response.text
        return response.json()["cordoned"]

    async def lifecycle(self, cell_id: str, **report: Any) -> dict[str, Any]:
        """One cell's report, and the BBS's answer for that cell."""
        response = await self.http.post("/v1/lifecycle", json={"cells": {cell_id: report}})
        assert response.status_code == 200, response.text
        return response.json()["cells"][cell_id]


def ref(index: int, guid: str, pg: str = "web") -> dict[str, Any]:
    return {"process_guid": pg, "index": index, "instance_guid": guid}


def running(index: int, guid: str, port: int = 61000) -> dict[str, Any]:
    return {**ref(index, guid), "host": "127.0.0.1", "ports": [{"container_port": 8080, "host_port": port}]}


async def desire(h: Harness, instances: int = 3, pg: str = "web") -> dict[str, Any]:
    response = await h.http.post(
        "/v1/desired_lrps", json={"process_guid": pg, "instances": instances, "memory_mb": 128,
                                  "command": ["true"]}
    )
    assert response.status_code == 201, response.text
    return response.json()
