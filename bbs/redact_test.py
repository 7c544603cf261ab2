"""env values stay with the admin (docs/security.md, "Secrets"): a reader's GETs, every event (the SSE
stream and what the NATS publisher is handed) and a completion callback show env names with `***`; an
admin's GETs and the start requests sent to the auctioneer carry the values.

The BBS in-process with authorization on: callers are bearer tokens of each role."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bbs.api import create_app
from bbs.core import BBS
from bbs.redact import MASK, masked_env
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from common.models import TokenCreate

AUCTIONEER = "http://auctioneer.test"
CALLBACK = "http://callback.test/done"
SECRET = "hunter2-db-password"  # an env value: must never be seen by anyone but an admin
ENV = {"DATABASE_PASSWORD": SECRET, "API_KEY": SECRET + "-key"}
MASKED = dict.fromkeys(ENV, MASK)


@dataclass
class World:
    """What the BBS sends out: bodies by URL."""

    sent: list[tuple[str, str]] = field(default_factory=list)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.sent.append((str(request.url), request.content.decode()))
        return httpx.Response(202, json={"accepted": 1})

    def to(self, prefix: str) -> list[str]:
        return [body for url, body in self.sent if url.startswith(prefix)]


@dataclass
class Harness:
    bbs: BBS
    world: World
    admin: httpx.AsyncClient
    reader: httpx.AsyncClient
    published: list[list[dict[str, Any]]]  # what an event sink (the NATS publisher) was handed


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    world = World()
    settings = BBSSettings(data_dir=tmp_path, auctioneer_url=AUCTIONEER, send_attempts=1)
    outbound = httpx.AsyncClient(transport=httpx.MockTransport(world.handle), timeout=5)
    async with running_bbs(settings, converge=False, client=outbound, callback_client=outbound) as bbs:
        published: list[list[dict[str, Any]]] = []
        bbs.hub.add_sink(published.append)
        transport = httpx.ASGITransport(app=create_app(bbs, insecure=False))
        clients = []
        for role in ("admin", "reader"):
            token = (await bbs.tokens.create(TokenCreate(role=role, name=role)))["token"]
            clients.append(httpx.AsyncClient(transport=transport, base_url="http://bbs", timeout=10,
                                             headers={"authorization": f"Bearer {token}"}))
        try:
            yield Harness(bbs, world, *clients, published)
        finally:
            for client in clients:
                await client.aclose()


async def desire_both(h: Harness) -> None:
    lrp = {"process_guid": "web", "instances": 2, "command": ["serve", "--port", "8080"], "env": ENV}
    assert (await h.admin.post("/v1/desired_lrps", json=lrp)).status_code == 201
    task = {"task_guid": "job", "command": ["migrate"], "env": ENV, "completion_callback_url": CALLBACK}
    assert (await h.admin.post("/v1/tasks", json=task)).status_code == 201


ROUTES = ["/v1/desired_lrps", "/v1/desired_lrps/web", "/v1/tasks", "/v1/tasks/job"]


def rows(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    body = response.json()
    return body["items"] if "items" in body else [body]


@pytest.mark.parametrize("path", ROUTES)
async def test_a_reader_sees_env_names_with_masked_values_and_the_admin_sees_the_values(
    h: Harness, path: str
) -> None:
    await desire_both(h)
    as_reader = await h.reader.get(path)
    assert SECRET not in as_reader.text, f"expected no env value in a reader's GET {path}: {as_reader.text}"
    assert [row["env"] for row in rows(as_reader)] == [MASKED]
    assert [row["command"] for row in rows(as_reader)] != [[]], "command is not masked (Diego shows it)"
    as_admin = await h.admin.get(path)
    assert [row["env"] for row in rows(as_admin)] == [ENV]


async def test_no_event_carries_an_env_value_while_the_auctioneer_gets_them(h: Harness) -> None:
    stream = h.bbs.hub.stream()
    assert bytes(await anext(stream)) == b": connected\n\n"
    await desire_both(h)
    assert (await h.admin.patch("/v1/desired_lrps/web", json={"instances": 3})).status_code == 200
    # Cancelled, the task is POSTed to its callback, which resolves it: task_removed.
    assert (await h.admin.post("/v1/tasks/job/cancel")).status_code == 200
    assert (await h.admin.delete("/v1/desired_lrps/web")).status_code == 204

    sse = ""
    while "event: task_removed" not in sse or "event: desired_lrp_removed" not in sse:
        sse += bytes(await asyncio.wait_for(anext(stream), 5)).decode()
    await stream.aclose()
    kinds = {"desired_lrp_created", "desired_lrp_changed", "desired_lrp_removed", "task_created",
             "task_changed", "task_removed"}
    assert kinds <= {line.removeprefix("event: ") for line in sse.splitlines()}, sse
    assert SECRET not in sse, f"expected no env value on the SSE stream: {sse}"
    to_sink = json.dumps(h.published)
    assert SECRET not in to_sink, "expected no env value in the events handed to the NATS publisher"
    created = next(e for batch in h.published for e in batch if e["type"] == "desired_lrp_created")
    assert created["data"]["env"] == MASKED

    # Those who run the app get it whole; the callback receiver learns the outcome, not the secrets.
    starts = h.world.to(AUCTIONEER)
    assert starts and all(SECRET in body for body in starts), "expected the start requests to carry env"
    [callback] = h.world.to(CALLBACK)
    assert SECRET not in callback and json.loads(callback)["env"] == MASKED, callback


def test_masking_copies_and_leaves_rows_without_env_alone() -> None:
    row = {"process_guid": "web", "env": dict(ENV)}
    assert masked_env(row) == {"process_guid": "web", "env": MASKED}
    assert row["env"] == ENV, "the row itself (shared with the auctioneer's start request) is untouched"
    actual = {"process_guid": "web", "index": 0}
    assert masked_env(actual) is actual
    assert masked_env({"env": {}}) == {"env": {}}


def test_an_artifacts_url_loses_its_query_and_credentials_where_env_is_masked() -> None:
    presigned = "https://bucket.s3.example.com/app.tgz?X-Amz-Signature=deadbeef&X-Amz-Credential=AKIA"
    row = {"process_guid": "web", "artifacts": [
        {"digest": "sha256:" + "a" * 64, "url": presigned, "dest": "app"},
        {"digest": "sha256:" + "b" * 64, "url": "https://user:pw@files.example.com:8443/x.tgz", "dest": "."},
        {"digest": "sha256:" + "c" * 64, "url": None, "dest": "."},
    ]}
    masked = masked_env(row)
    assert [a["url"] for a in masked["artifacts"]] == [
        "https://bucket.s3.example.com/app.tgz?***", "https://***@files.example.com:8443/x.tgz", None]
    assert "deadbeef" not in json.dumps(masked) and "pw@" not in json.dumps(masked)
    assert row["artifacts"][0]["url"] == presigned, "the row itself (what the rep is sent) is untouched"
