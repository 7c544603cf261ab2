"""The auctioneer's election against a real BBS in-process (SQLite): one leader, a standby that knows
where it is, a takeover with the next fencing token within one TTL, and stepping down on time."""

from __future__ import annotations

import contextlib
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


async def test_one_leads_the_other_stands_by_and_takes_over_with_the_next_token(tmp_path: Path) -> None:
    async with bbs_client(tmp_path) as bbs:
        first, second = Leadership(bbs, "http://a1", TTL), Leadership(bbs, "http://a2", TTL)
        first.start()
        try:
            await wait_until(lambda: first.leader, lambda: f"a1 leading; saw {describe(first)}")
            second.start()
            await wait_until(lambda: second.holder_url == "http://a1", lambda: f"a2 standing by; {describe(second)}")
            assert (first.leader, first.token, second.leader) == (True, 1, False)
            await first.stop()  # as if killed: no more renewals, the lease is left to expire
            await wait_until(lambda: second.leader, lambda: f"a2 leading; saw {describe(first, second)}",
                             timeout=TTL + 1.0)
            assert second.token == 2
        finally:
            await first.stop()
            await second.stop()


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


async def test_without_a_lease_api_the_auctioneer_leads_unfenced() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(404)),
                                 base_url="http://old-bbs") as old:
        lone = Leadership(old, "http://a1", TTL)
        lone.start()
        try:
            await wait_until(lambda: lone.leader, lambda: f"leading; saw {describe(lone)}")
            assert lone.token == 0
        finally:
            await lone.stop()
