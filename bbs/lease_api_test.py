"""The BBS lease API in-process (httpx ASGITransport), on SQLite and on PostgreSQL: the election the
auctioneer replicas run through any BBS replica."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from bbs.api import create_app
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from tests.support.polling import eventually, expect

pytestmark = pytest.mark.timeout(60)


CONFIGURED = "http://auctioneer.test"
WAIT_S = 5.0


@pytest.fixture
def sent() -> list[str]:
    """URLs the BBS sent start requests to."""
    return []


@pytest.fixture
async def http(tmp_path: Path, database_url: str, sent: list[str]):
    def auctioneer(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        return httpx.Response(202, json={})

    settings = BBSSettings(
        data_dir=tmp_path, database_url=database_url, auctioneer_url=CONFIGURED, send_attempts=1
    )
    outbound = httpx.AsyncClient(transport=httpx.MockTransport(auctioneer))
    async with running_bbs(settings, converge=False, client=outbound) as bbs:
        transport = httpx.ASGITransport(app=create_app(bbs, insecure=True))
        async with httpx.AsyncClient(transport=transport, base_url="http://bbs", timeout=10) as client:
            yield client


async def take(http: httpx.AsyncClient, owner: str, ttl_s: float = 30.0, url: str = "") -> dict[str, Any]:
    response = await http.post("/v1/leases/auctioneer", json={"owner": owner, "url": url, "ttl_s": ttl_s})
    assert response.status_code == 200, response.text
    return response.json()


async def lease_gone(http: httpx.AsyncClient) -> bool:
    response = await http.get("/v1/leases/auctioneer")
    return expect(response.status_code == 404, response.text)


async def test_nobody_holds_a_lease_never_taken(http: httpx.AsyncClient) -> None:
    assert (await http.get("/v1/leases/auctioneer")).status_code == 404


async def test_first_owner_takes_it_renews_it_and_keeps_its_token(http: httpx.AsyncClient) -> None:
    first = await take(http, "a", url="http://a:1")
    assert (first["held"], first["owner"], first["url"], first["token"]) == (True, "a", "http://a:1", 1)
    renewed = await take(http, "a", url="http://a:1")
    assert (renewed["held"], renewed["token"]) == (True, 1)
    assert renewed["expires_at"] >= first["expires_at"]
    current = (await http.get("/v1/leases/auctioneer")).json()
    assert (current["owner"], current["url"], current["token"]) == ("a", "http://a:1", 1)


async def test_another_owner_is_refused_and_told_the_holder(http: httpx.AsyncClient) -> None:
    await take(http, "a", url="http://a:1")
    refused = await take(http, "b", url="http://b:2")
    assert (refused["held"], refused["owner"], refused["url"], refused["token"]) == (
        False,
        "a",
        "http://a:1",
        1,
    )


async def test_after_expiry_a_new_holder_gets_the_next_token(http: httpx.AsyncClient) -> None:
    await take(http, "a", ttl_s=0.2)
    await eventually(lambda: lease_gone(http), WAIT_S, "the lease to expire")
    taken = await take(http, "b", url="http://b:2")
    assert (taken["held"], taken["owner"], taken["token"]) == (True, "b", 2)
    late = await take(http, "a")  # the old holder, back after its lease ran out, cannot renew
    assert (late["held"], late["owner"], late["token"]) == (False, "b", 2)


async def test_a_bad_lease_request_is_422_naming_the_field(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/leases/auctioneer", json={"owner": "a", "ttl_s": 0})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "ttl_s"]


async def desire(http: httpx.AsyncClient, process_guid: str) -> None:
    response = await http.post("/v1/desired_lrps", json={"process_guid": process_guid, "memory_mb": 1,
                                                         "command": ["true"]})
    assert response.status_code == 201, response.text


async def test_start_requests_go_to_the_elected_auctioneer_else_to_the_configured_one(
    http: httpx.AsyncClient, sent: list[str]
) -> None:
    await desire(http, "before")
    await eventually(lambda: len(sent) >= 1, WAIT_S, "1 start request sent", lambda: sent)
    await take(http, "a", url="http://elected.test")
    await desire(http, "after")  # the holder is looked up afresh: nothing cached yet
    await eventually(lambda: len(sent) >= 2, WAIT_S, "2 start requests sent", lambda: sent)
    assert sent == [CONFIGURED + "/v1/lrps", "http://elected.test/v1/lrps"]


async def release(http: httpx.AsyncClient, owner: str, token: int) -> httpx.Response:
    return await http.delete("/v1/leases/auctioneer", params={"owner": owner, "token": token})


async def test_the_holder_releases_it_and_another_owner_takes_it_at_once_with_the_next_token(
    http: httpx.AsyncClient,
) -> None:
    await take(http, "a", ttl_s=300.0, url="http://a:1")
    response = await release(http, "a", 1)
    assert response.status_code == 204, (
        f"expected 204 releasing a's lease, saw {response.status_code} {response.text}"
    )
    assert (await http.get("/v1/leases/auctioneer")).status_code == 404  # nobody holds it any more
    assert (await release(http, "a", 1)).status_code == 204  # released twice: still released
    taken = await take(http, "b", url="http://b:2")  # long before a's 300 s would have run out
    assert (taken["held"], taken["owner"], taken["token"]) == (True, "b", 2)
    late = await release(http, "a", 1)  # a's old term cannot release b's
    assert late.status_code == 409, f"expected 409 for the old holder, saw {late.status_code} {late.text}"
    assert (await http.get("/v1/leases/auctioneer")).json()["owner"] == "b"


async def test_a_non_owner_or_another_term_cannot_release_it(http: httpx.AsyncClient) -> None:
    await take(http, "a", url="http://a:1")
    for owner, token in (("b", 1), ("a", 2), ("a", 0)):
        response = await release(http, owner, token)
        assert response.status_code == 409, (
            f"expected 409 releasing as {owner}/{token}, saw {response.status_code} {response.text}")
    current = (await http.get("/v1/leases/auctioneer")).json()
    assert (current["owner"], current["token"]) == ("a", 1)
    refused = await take(http, "b")
    assert (refused["held"], refused["owner"]) == (False, "a")


async def test_releasing_a_lease_never_taken_is_404_and_owner_and_token_are_required(
    http: httpx.AsyncClient,
) -> None:
    assert (await release(http, "a", 1)).status_code == 404
    missing = await http.delete("/v1/leases/auctioneer", params={"owner": "a"})
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["query", "token"]


async def test_a_replica_whose_clock_runs_ahead_neither_takes_nor_loses_an_unexpired_lease(
    http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expiry is the database's call: this BBS's own clock an hour off changes nothing."""
    await take(http, "a", ttl_s=30.0, url="http://a:1")
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    refused = await take(http, "b", url="http://b:2")
    assert (refused["held"], refused["owner"], refused["token"]) == (False, "a", 1)
    current = await http.get("/v1/leases/auctioneer")
    assert current.status_code == 200 and current.json()["owner"] == "a", current.text
