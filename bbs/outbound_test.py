"""Outgoing calls: coalesced auctioneer sends with retries; failures are logged, never raised."""

from __future__ import annotations

import httpx

from bbs.metrics import BBSMetrics
from bbs.outbound import Outbound


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
        outbound.stop_instance("http://127.0.0.1:1", "web", "g1")  # nothing listens on port 1
        outbound.cancel_task("not a url", "t1")
        await outbound.drain(5)
        assert not await outbound.task_callback("http://127.0.0.1:1/cb", {"task_guid": "t1"})
    finally:
        await outbound.close()
