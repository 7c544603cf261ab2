"""The auctioneer's election against a real BBS in-process (SQLite): one leader, a standby that knows
where it is, a takeover with the next fencing token within one TTL, stepping down on time, the release of
the lease on a graceful stop, and no leadership without a lease (a 404, an unreachable BBS)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from auctioneer.service.leadership import Leadership
from bbs.api import create_app
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from tests.auctioneer.fakes import wait_until

pytestmark = pytest.mark.timeout(60)
TTL = 0.6


@contextlib.asynccontextmanager
async def bbs_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = BBSSettings(data_dir=tmp_path, auctioneer_url="http://auctioneer.test")
    async with running_bbs(settings, converge=False) as bbs:
        transport = httpx.ASGITransport(app=create_app(bbs))
        async with httpx.AsyncClient(transport=transport, base_url="http://bbs", timeout=5) as client:
            yield client


def describe(*auctioneers: Leadership) -> str:
    return ", ".join(f"{a.url}: leader={a.leader} token={a.token} holder={a.holder_url!r}" for a in auctioneers)


@contextlib.asynccontextmanager
async def leader_and_standby(bbs: httpx.AsyncClient, ttl: float) -> AsyncIterator[tuple[Leadership, Leadership]]:
    """a1 leading and a2 standing by (it has seen a1 hold the lease); both stopped afterwards."""
    first, second = Leadership(bbs, "http://a1", ttl), Leadership(bbs, "http://a2", ttl)
    first.start()
    try:
        await wait_until(lambda: first.leader, lambda: f"a1 leading; saw {describe(first)}")
        second.start()
        await wait_until(lambda: second.holder_url == "http://a1", lambda: f"a2 standing by; {describe(second)}")
        yield first, second
    finally:
        await first.stop()
        await second.stop()


async def test_one_leads_the_other_stands_by_and_takes_over_with_the_next_token(tmp_path: Path) -> None:
    async with bbs_client(tmp_path) as bbs:
        async with leader_and_standby(bbs, TTL) as (first, second):
            assert (first.leader, first.token, second.leader) == (True, 1, False)
            await first.stop(release=False)  # as if killed: no more renewals, the lease is left to expire
            await wait_until(lambda: second.leader, lambda: f"a2 leading; saw {describe(first, second)}",
                             timeout=TTL + 1.0)
            assert second.token == 2


async def test_a_leader_that_cannot_renew_steps_down_when_its_lease_runs_out(tmp_path: Path) -> None:
    reachable = {"yes": True}

    async with bbs_client(tmp_path) as bbs:
        async def cut(request: httpx.Request) -> httpx.Response:
            if not reachable["yes"]:
                raise httpx.ConnectError("unreachable", request=request)
            return await bbs.send(request)

        async with httpx.AsyncClient(transport=httpx.MockTransport(cut), base_url="http://bbs") as flaky:
            leader = Leadership(flaky, "http://a1", TTL)
            changes: list[bool] = []
            leader.on_change(changes.append)
            leader.start()
            try:
                await wait_until(lambda: leader.leader, lambda: f"leading; saw {describe(leader)}")
                reachable["yes"] = False
                await wait_until(lambda: not leader.leader and changes == [True, False],
                                 lambda: f"stepped down; saw {describe(leader)}, changes {changes}",
                                 timeout=TTL + 0.5)
            finally:
                await leader.stop()


@pytest.mark.parametrize("bbs", ["no lease API", "unreachable"])
async def test_without_a_lease_answer_the_auctioneer_never_leads(bbs: str) -> None:
    attempts = 0

    def answer(request: httpx.Request) -> httpx.Response:
        nonlocal attempts
        attempts += 1
        if bbs == "unreachable":
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(404, json={"detail": "Not Found"})

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://bbs") as client:
        lone = Leadership(client, "http://a1", TTL)
        changes: list[bool] = []
        lone.on_change(changes.append)
        lone.start()
        try:
            # Retried sooner than TTL/3 after a failure; three tries leave it as it started.
            await wait_until(lambda: attempts >= 3, lambda: f"3 lease attempts, saw {attempts}")
            assert (lone.leader, lone.token, changes) == (False, 0, []), describe(lone)
            expected = "404" if bbs == "no lease API" else "no BBS reachable"
            assert lone.problem is not None and expected in lone.problem, lone.problem
        finally:
            await lone.stop()
        assert attempts >= 3 and not lone.leader


async def test_a_leader_that_gets_404_steps_down_at_once(tmp_path: Path) -> None:
    lease_api = {"yes": True}

    async with bbs_client(tmp_path) as bbs:
        async def answer(request: httpx.Request) -> httpx.Response:
            return await bbs.send(request) if lease_api["yes"] else httpx.Response(404)

        async with httpx.AsyncClient(transport=httpx.MockTransport(answer), base_url="http://bbs") as replaced:
            leader = Leadership(replaced, "http://a1", 60.0)  # its lease would last a minute without the 404
            leader.start()
            try:
                await wait_until(lambda: leader.leader, lambda: f"leading; saw {describe(leader)}")
                lease_api["yes"] = False
                leader.wake()
                await wait_until(lambda: not leader.leader, lambda: f"standing by; saw {describe(leader)}",
                                 timeout=2.0)
                assert leader.problem is not None and "404" in leader.problem
            finally:
                await leader.stop()


async def test_a_leader_that_stops_releases_the_lease_and_the_standby_leads_long_before_the_ttl(
    tmp_path: Path,
) -> None:
    ttl = 9.0  # the standby tries every TTL/3; without the release it would wait until the TTL ran out
    async with bbs_client(tmp_path) as bbs:
        async with leader_and_standby(bbs, ttl) as (first, second):
            lease = (await bbs.get("/v1/leases/auctioneer")).json()
            await first.stop()  # a graceful stop: the lease is released
            assert not first.leader
            now = await bbs.get("/v1/leases/auctioneer")  # released: nobody's, or the standby's already
            assert now.status_code == 404 or now.json()["owner"] == second.owner, now.text
            await wait_until(lambda: second.leader, lambda: f"a2 leading; saw {describe(first, second)}",
                             timeout=ttl / 3 + 2.0)
            assert time.time() < lease["expires_at"] - 2.0, "expected the takeover well before a1's lease ran out"
            assert second.token == 2


async def test_a_woken_standby_takes_a_released_lease_at_once(tmp_path: Path) -> None:
    ttl = 60.0
    async with bbs_client(tmp_path) as bbs:
        async with leader_and_standby(bbs, ttl) as (first, second):
            await first.stop()
            second.wake()  # as the auctioneer does when it cannot forward to the old holder
            await wait_until(lambda: second.leader, lambda: f"a2 leading; saw {describe(first, second)}",
                             timeout=2.0)


async def test_stop_without_release_leaves_the_lease_to_expire(tmp_path: Path) -> None:
    async with bbs_client(tmp_path) as bbs:
        lone = Leadership(bbs, "http://a1", 60.0)
        lone.start()
        try:
            await wait_until(lambda: lone.leader, lambda: f"a1 leading; saw {describe(lone)}")
            await lone.stop(release=False)
            held = await bbs.get("/v1/leases/auctioneer")
            assert held.status_code == 200 and held.json()["owner"] == lone.owner, held.text
        finally:
            await lone.stop()
