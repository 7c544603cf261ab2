"""The auctioneer's election against a real BBS in-process (SQLite): one leader, a standby that knows
where it is, a takeover with the next fencing token within one TTL, stepping down as soon as a renewal fails
or is overdue (and leading again with the same token when the lease is still its own), the release of
the lease on a graceful stop, and no leadership without a lease (a 404, an unreachable BBS)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from auctioneer.leadership import Leadership
from bbs.api import create_app
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from common.procutil import free_port
from tests.auctioneer.fakes import WAIT_S
from tests.fake_bbs import fake_bbs
from tests.support.polling import eventually

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
    return ", ".join(
        f"{a.url}: leader={a.leader} token={a.token} holder={a.holder_url!r}" for a in auctioneers
    )


@contextlib.asynccontextmanager
async def leader_and_standby(
    bbs: httpx.AsyncClient, ttl: float
) -> AsyncIterator[tuple[Leadership, Leadership]]:
    """a1 leading and a2 standing by (it has seen a1 hold the lease); both stopped afterwards."""
    first, second = Leadership(bbs, "http://a1", ttl), Leadership(bbs, "http://a2", ttl)
    first.start()
    try:
        await eventually(lambda: first.leader, WAIT_S, "a1 leading", lambda: describe(first))
        second.start()
        await eventually(lambda: second.holder_url == "http://a1", WAIT_S, "a2 standing by",
                         lambda: describe(second))
        yield first, second
    finally:
        await first.stop()
        await second.stop()


async def test_one_leads_the_other_stands_by_and_takes_over_with_the_next_token(tmp_path: Path) -> None:
    async with bbs_client(tmp_path) as bbs:
        async with leader_and_standby(bbs, TTL) as (first, second):
            assert (first.leader, first.token, second.leader) == (True, 1, False)
            await first.stop(release=False)  # as if killed: no more renewals, the lease is left to expire
            await eventually(lambda: second.leader, TTL + 1.0, "a2 leading", lambda: describe(first, second))
            assert second.token == 2


class Switchable:
    """A BBS client's transport the test breaks and mends: "up" passes to the BBS, "down" refuses at once,
    "500" answers an error, "hang" keeps the request until the test lets it through (`release`)."""

    def __init__(self, bbs: httpx.AsyncClient) -> None:
        self.bbs = bbs
        self.mode = "up"
        self.release = asyncio.Event()
        self.hung = 0  # requests held by "hang"
        self.answered = 0  # requests the BBS answered

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.mode == "down":
            raise httpx.ConnectError("unreachable", request=request)
        if self.mode == "500":
            return httpx.Response(500, json={"detail": "database unavailable"})
        if self.mode == "hang":
            self.hung += 1
            await self.release.wait()
        answer = await self.bbs.send(request)
        self.answered += 1
        return answer


# Renewals every 1.5 s, each given 1.5 s to be answered: a leader that stepped down only when its lease
# ran out would take 4.5 s. With 1.5 s (0.5 s to answer), a loaded machine once made a renewal overdue before
# the cut, and the leader stepped down and led again before the test's own cut.
RENEW_TTL = 4.5
HUNG_TTL = 60.0  # renewals every 20 s unless woken; the lease outlasts every wait of the test


def attempts_at_each_change(leadership: Leadership) -> list[int]:
    """The lease attempts made (`attempts`) when each leadership change fired, in order: which attempt
    made it lead or step down."""
    seen: list[int] = []
    leadership.on_change(lambda _leading: seen.append(leadership.attempts))
    return seen


@pytest.mark.parametrize("failure", ["down", "500"])
async def test_a_leader_that_cannot_renew_steps_down_at_once_and_leads_again_with_its_token(
    tmp_path: Path, failure: str,
) -> None:
    async with bbs_client(tmp_path) as bbs:
        link = Switchable(bbs)
        async with httpx.AsyncClient(transport=httpx.MockTransport(link), base_url="http://bbs") as client:
            leader = Leadership(client, "http://a1", RENEW_TTL)
            changes: list[bool] = []
            leader.on_change(changes.append)
            changed_at_attempt = attempts_at_each_change(leader)
            leader.start()
            try:
                await eventually(lambda: leader.leader, WAIT_S, "leading", lambda: describe(leader))
                token, attempts = leader.token, leader.attempts
                await eventually(lambda: leader.attempts > attempts, WAIT_S, "a renewal")  # just renewed
                link.mode = failure
                cut_at_attempt = leader.attempts  # that renewal may still be under way: the cut may fail it
                await eventually(
                    lambda: not leader.leader and changes == [True, False],
                    WAIT_S, "stepped down", lambda: f"{describe(leader)}, changes {changes}",
                )
                # At the first renewal the cut failed, not when the last renewal's TTL ran out (by then it
                # would have tried again twice, retrying sooner after a failure).
                assert changed_at_attempt[1] <= cut_at_attempt + 1, (
                    f"stepped down at attempt {changed_at_attempt[1]}, the cut came after {cut_at_attempt}")
                assert leader.problem is not None and leader.token == token

                link.mode = "up"  # nobody took the lease meanwhile: the BBS still names a1 its owner
                # The change fires once the attempt is over (`leader` turns true just before).
                await eventually(lambda: changes == [True, False, True], WAIT_S, "leading again",
                                 lambda: f"{describe(leader)}, changes {changes}")
                assert (leader.token, changes, leader.terms, leader.problem) == (
                    token,
                    [True, False, True],
                    2,
                    None,
                )
            finally:
                await leader.stop()


async def test_a_leader_whose_renewal_has_no_answer_in_time_steps_down_and_a_late_answer_restores_it(
    tmp_path: Path,
) -> None:
    async with bbs_client(tmp_path) as bbs:
        link = Switchable(bbs)
        async with httpx.AsyncClient(transport=httpx.MockTransport(link), base_url="http://bbs") as client:
            # The request timeout is 0.3 s; the hung request itself never times out (the mock ignores it),
            # as when the failover transport is still trying the next BBS replica. The lease lasts a minute:
            # the leader cannot step down for its lease running out while the test waits.
            leader = Leadership(client, "http://a1", HUNG_TTL, timeout=0.3)
            changes: list[bool] = []
            leader.on_change(changes.append)
            leader.start()
            try:
                await eventually(lambda: leader.leader, WAIT_S, "leading", lambda: describe(leader))
                token, answered = leader.token, link.answered
                leader.wake()  # a renewal now (not 20 s away), answered in time: it keeps leading
                await eventually(lambda: link.answered > answered and leader.problem is None, WAIT_S,
                                 "a renewal answered", lambda: describe(leader))
                assert changes == [True], "a renewal answered within the request timeout keeps it leading"
                link.mode = "hang"
                leader.wake()
                await eventually(lambda: link.hung == 1, WAIT_S, "a renewal sent")
                await eventually(lambda: not leader.leader and changes == [True, False], WAIT_S,
                                 "stepped down", lambda: f"{describe(leader)}, changes {changes}")
                assert (link.hung, link.release.is_set()) == (1, False), (
                    "stepped down while its one renewal still has no answer")
                link.mode = "up"
                link.release.set()  # the same renewal answers late: the lease is still a1's
                await eventually(lambda: changes == [True, False, True], WAIT_S, "leading again",
                                 lambda: f"{describe(leader)}, changes {changes}")
                assert (leader.token, leader.leader) == (token, True)
            finally:
                link.mode = "up"  # also when the test failed: the stop's release must not hang
                link.release.set()
                await leader.stop()


async def test_a_leader_that_stepped_down_stands_by_when_another_took_the_lease_meanwhile(
    tmp_path: Path,
) -> None:
    async with bbs_client(tmp_path) as bbs:
        link = Switchable(bbs)
        async with httpx.AsyncClient(transport=httpx.MockTransport(link), base_url="http://bbs") as client:
            first, second = (
                Leadership(client, "http://a1", RENEW_TTL),
                Leadership(bbs, "http://a2", RENEW_TTL),
            )
            first.start()
            try:
                await eventually(lambda: first.leader, WAIT_S, "a1 leading", lambda: describe(first))
                second.start()
                link.mode = "down"  # a1 cut off from the BBS; a2 is not
                await eventually(lambda: second.leader, RENEW_TTL + 1.0, "a2 leading",
                                 lambda: describe(first, second))
                link.mode = "up"
                await eventually(lambda: first.problem is None, RENEW_TTL, "a1 back",
                                 lambda: describe(first))
                assert (first.leader, first.holder_url, second.token) == (False, "http://a2", first.token + 1)
            finally:
                await first.stop()
                await second.stop()


@pytest.mark.parametrize("bbs_answer", ["no lease API", "unreachable"])
async def test_without_a_lease_answer_the_auctioneer_never_leads(bbs_answer: str) -> None:
    async with fake_bbs() as bbs:
        bbs.lease_api = False  # 404 to every lease request, as a BBS without the lease API
        bbs_url = bbs.url if bbs_answer == "no lease API" else f"http://127.0.0.1:{free_port()}"
        async with httpx.AsyncClient(base_url=bbs_url) as client:
            lone = Leadership(client, "http://a1", TTL)
            changes: list[bool] = []
            lone.on_change(changes.append)
            lone.start()
            try:
                # Retried sooner than TTL/3 after a failure; three tries leave it as it started.
                await eventually(lambda: lone.attempts >= 3, WAIT_S, "3 lease attempts",
                                 lambda: lone.attempts)
                assert (lone.leader, lone.token, changes) == (False, 0, []), describe(lone)
                expected = "404" if bbs_answer == "no lease API" else "no BBS reachable"
                assert lone.problem is not None and expected in lone.problem, lone.problem
            finally:
                await lone.stop()
            assert lone.attempts >= 3 and not lone.leader


async def test_a_leader_that_gets_404_steps_down_at_once(tmp_path: Path) -> None:
    lease_api = {"yes": True}

    async with bbs_client(tmp_path) as bbs:
        async def answer(request: httpx.Request) -> httpx.Response:
            return await bbs.send(request) if lease_api["yes"] else httpx.Response(404)

        async with httpx.AsyncClient(
            transport=httpx.MockTransport(answer), base_url="http://bbs"
        ) as replaced:
            leader = Leadership(replaced, "http://a1", 60.0)  # its lease would last a minute without the 404
            leader.start()
            try:
                await eventually(lambda: leader.leader, WAIT_S, "leading", lambda: describe(leader))
                lease_api["yes"] = False
                leader.wake()
                await eventually(lambda: not leader.leader, 2.0, "standing by", lambda: describe(leader))
                assert leader.problem is not None and "404" in leader.problem
            finally:
                await leader.stop()


async def test_a_leader_that_stops_releases_the_lease_and_the_standby_leads_long_before_the_ttl(
    tmp_path: Path,
) -> None:
    ttl = 9.0  # the standby tries every TTL/3; without the release it would wait until the TTL ran out
    async with bbs_client(tmp_path) as bbs:
        async with leader_and_standby(bbs, ttl) as (first, second):
            led_at: list[float] = []  # when a2 began to lead, on the clock the BBS keeps leases by

            def note_lead(leading: bool) -> None:
                if leading:
                    led_at.append(time.time())

            second.on_change(note_lead)
            lease = (await bbs.get("/v1/leases/auctioneer")).json()  # a1's, as it last renewed it
            await first.stop()  # a graceful stop: the lease is released
            assert not first.leader
            now = await bbs.get("/v1/leases/auctioneer")  # released: nobody's, or the standby's already
            assert now.status_code == 404 or now.json()["owner"] == second.owner, now.text
            await eventually(lambda: second.leader, ttl + WAIT_S, "a2 leading",
                             lambda: describe(first, second))
            # Before a1's lease would have run out: a2 took the released lease at its next attempt.
            assert led_at and led_at[0] < lease["expires_at"], (
                f"a2 led at {led_at}, after a1's lease ran out at {lease['expires_at']}")
            assert second.token == 2


async def test_a_woken_standby_takes_a_released_lease_at_once(tmp_path: Path) -> None:
    ttl = 60.0
    async with bbs_client(tmp_path) as bbs:
        async with leader_and_standby(bbs, ttl) as (first, second):
            await first.stop()
            second.wake()  # as the auctioneer does when it cannot forward to the old holder
            await eventually(lambda: second.leader, 2.0, "a2 leading", lambda: describe(first, second))


async def test_stop_without_release_leaves_the_lease_to_expire(tmp_path: Path) -> None:
    async with bbs_client(tmp_path) as bbs:
        lone = Leadership(bbs, "http://a1", 60.0)
        lone.start()
        try:
            await eventually(lambda: lone.leader, WAIT_S, "a1 leading", lambda: describe(lone))
            await lone.stop(release=False)
            held = await bbs.get("/v1/leases/auctioneer")
            assert held.status_code == 200 and held.json()["owner"] == lone.owner, held.text
        finally:
            await lone.stop()
