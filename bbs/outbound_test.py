"""Outgoing calls: coalesced auctioneer sends with retries; failures are logged, never raised."""

from __future__ import annotations

import httpx

from bbs.metrics import BBSMetrics
from bbs.outbound import REP_STATE_CELLS_MAX, Outbound
from bbs.records import CellRecord
from common.models import CancelTasks, StopInstances


def cell(cell_id: str, rep_url: str, rep_id: str = "") -> CellRecord:
    return CellRecord(cell_id, {"zone": "z1", "rep_url": rep_url, "rep_id": rep_id}, expires_at=0.0)


async def test_queued_starts_are_coalesced_and_a_failed_send_is_retried_then_dropped() -> None:
    posts: list[int] = []
    failures = {"left": 1}

    def handle(request: httpx.Request) -> httpx.Response:
        if failures["left"]:
            failures["left"] -= 1
            return httpx.Response(503)
        posts.append(len(httpx.Response(200, content=request.content).json()))
        return httpx.Response(202, json={})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    outbound = Outbound("http://auctioneer.test", BBSMetrics(), attempts=2, client=client)
    outbound.start()
    try:
        outbound.auction_lrps([{"n": 1}])
        outbound.auction_lrps([{"n": 2}, {"n": 3}])  # queued before the sender ran: one POST
        await outbound.drain(5)
        assert posts == [3]  # the first attempt got a 503, the retry carried all three

        failures["left"] = 5
        outbound.auction_tasks([{"task": {}}])
        await outbound.drain(5)  # two attempts, both failed: dropped for convergence, nothing raised
        assert posts == [3]
    finally:
        await outbound.close()


async def test_rep_calls_to_bad_urls_are_logged_not_raised() -> None:
    outbound = Outbound("http://auctioneer.test", BBSMetrics(), client=httpx.AsyncClient(timeout=1))
    try:
        outbound.stop_instance(cell("c1", "http://127.0.0.1:1"), "web", "g1")  # nothing listens on port 1
        outbound.cancel_task(cell("c2", "not a url"), "t1")
        await outbound.drain(5)
        assert not await outbound.task_callback("http://127.0.0.1:1/cb", {"task_guid": "t1"})
    finally:
        await outbound.close()


async def test_a_start_request_outlives_a_dead_leader_until_the_lease_names_the_next_one() -> None:
    """The elected auctioneer dies; its lease names it until it expires. Within the retry window the
    request is tried again, the lease looked up each time, and reaches the new holder."""
    import time

    delivered: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.host == "dead.test":
            raise httpx.ConnectError("connection refused", request=request)
        delivered.append(request.url.host)
        return httpx.Response(202, json={})

    handover_at = time.monotonic() + 0.6

    async def lease_holder() -> str:
        return "http://dead.test" if time.monotonic() < handover_at else "http://standby.test"

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    outbound = Outbound("http://configured.test", BBSMetrics(), attempts=1, retry_window_s=5.0,
                        client=client, find_auctioneer=lease_holder)
    outbound.start()
    try:
        outbound.auction_lrps([{"n": 1}])
        await outbound.drain(10)
        assert delivered == ["standby.test"], delivered
    finally:
        await outbound.close()


async def test_stops_and_cancels_of_one_burst_go_in_one_request_per_rep_process() -> None:
    requests: list[tuple[str, bytes]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        requests.append((f"{request.method} {request.url}", request.content))
        return httpx.Response(202, json={"found": []})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    outbound = Outbound("http://auctioneer.test", BBSMetrics(), client=client)
    a0, a1, b0 = (
        cell("a-0", "http://a.test/", "a"),
        cell("a-1", "http://a.test", "a"),
        cell("b-0", "http://b.test", "b"),
    )
    try:
        outbound.stop_instance(a0, "web", "g0")  # one transaction's effects: queued together
        outbound.stop_instance(b0, "web", "g1")
        outbound.stop_instance(a1, "api", "g2")
        outbound.cancel_task(a1, "t1")
        outbound.cancel_task(a0, "t2")
        await outbound.drain(5)
        by_route = {route: body for route, body in requests}
        assert sorted(by_route) == ["POST http://a.test/cancel", "POST http://a.test/stop", "POST http://b.test/stop"]
        stops = StopInstances.model_validate_json(by_route["POST http://a.test/stop"]).instances
        assert [(s.cell_id, s.process_guid, s.instance_guid) for s in stops] == [
            ("a-0", "web", "g0"),
            ("a-1", "api", "g2"),
        ]
        cancels = CancelTasks.model_validate_json(by_route["POST http://a.test/cancel"]).tasks
        assert [(c.cell_id, c.task_guid) for c in cancels] == [("a-1", "t1"), ("a-0", "t2")]

        outbound.stop_instance(a0, "web", "g3")  # a later burst: its own request
        await outbound.drain(5)
        assert [route for route, _ in requests].count("POST http://a.test/stop") == 2
    finally:
        await outbound.close()


def detail(cell_id: str, rep_url: str, *guids: str) -> dict:
    """A CellDetail as a rep's GET /state?lrps=full carries it."""
    size = {"memory_mb": 1, "disk_mb": 1, "containers": 1}
    return {"bid": {"cell_id": cell_id, "zone": "z1", "total": size, "available": size}, "rep_url": rep_url,
            "lrps": [{"process_guid": "web", "index": i, "instance_guid": g, "memory_mb": 1, "disk_mb": 1}
                     for i, g in enumerate(guids)]}


async def test_cells_instances_are_read_from_their_reps_full_state_one_request_per_rep_process() -> None:
    hosted = {"http://a.test": [detail("a-1", "http://a.test", "g0"), detail("a-3", "http://a.test")],
              "http://b.test": [detail("b-1", "http://b.test", "g1", "g2")]}
    asked: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        asked.append(str(request.url))
        if request.url.host == "down.test":
            raise httpx.ConnectError("connection refused", request=request)
        wanted = request.url.params["cells"].split(",")
        rep_url = f"http://{request.url.host}"
        answer = [d for d in hosted[rep_url] if d["bid"]["cell_id"] in wanted]
        return httpx.Response(200, json={"cells": answer})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    outbound = Outbound("http://auctioneer.test", BBSMetrics(), client=client)
    try:
        returning = [cell("a-1", "http://a.test", "a"), cell("b-1", "http://b.test/", "b"),
                     cell("a-2", "http://a.test", "a"), cell("a-3", "http://a.test", "a"),
                     cell("d-1", "http://down.test", "d")]
        held = await outbound.cells_instances(returning)
        # a-2: not hosted there (any more); d-1: its rep does not answer. Neither is known.
        assert held == {"a-1": {"g0"}, "a-3": set(), "b-1": {"g1", "g2"}}
        assert sorted(asked) == ["http://a.test/state?lrps=full&cells=a-1%2Ca-2%2Ca-3",
                                 "http://b.test/state?lrps=full&cells=b-1",
                                 "http://down.test/state?lrps=full&cells=d-1"]

        asked.clear()  # a process hosting many cells: REP_STATE_CELLS_MAX of them per request
        many = [cell(f"a-{i}", "http://a.test", "a") for i in range(REP_STATE_CELLS_MAX + 1)]
        assert await outbound.cells_instances(many) == {"a-1": {"g0"}, "a-3": set()}
        named = [httpx.URL(url).params["cells"].split(",") for url in asked]
        assert [len(n) for n in named] == [REP_STATE_CELLS_MAX, 1] and sum(named, []) == [
            c.cell_id for c in many
        ]
    finally:
        await outbound.close()
