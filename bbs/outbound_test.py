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
