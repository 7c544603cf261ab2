"""The latency and refusal series, on an app with the authorization and the limits every service installs."""

from __future__ import annotations

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import BaseModel

from common.auth import Policy, add_auth, public, rule
from common.http_metrics import HTTPMetrics, add_http_metrics, mark_refusal
from common.limits import RequestLimitOptions, add_limits
from common.tls import Identity

ADMIN_TOKEN = {"Authorization": "Bearer admin"}


class Thing(BaseModel):
    size: int


def make_app(registry: CollectorRegistry) -> FastAPI:
    app = FastAPI()

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        return JSONResponse({"ready": False, "reason": "the database does not answer"}, status_code=503)

    @app.get("/things/{thing_id}")
    async def get_thing(thing_id: str) -> dict:
        return {"thing_id": thing_id}

    @app.post("/things")
    async def make_thing(body: Thing) -> dict:
        return body.model_dump()

    @app.post("/writes")
    async def write(request: Request, token: int) -> JSONResponse:
        if token < 7:
            mark_refusal(request.scope, "fenced")
            return JSONResponse({"detail": "stale fencing token"}, status_code=409)
        raise HTTPException(429, "quota")

    async def verify(token: str) -> Identity | None:
        return Identity("admin", "ops", via="token") if token == "admin" else None

    policy = Policy(
        {
            ("GET", "/readyz"): public(),
            ("GET", "/things/{thing_id}"): rule("admin", "reader"),
            ("POST", "/things"): rule("admin"),
            ("POST", "/writes"): rule("admin"),
        }
    )
    add_auth(app, policy, verify_token=verify)
    add_limits(app, RequestLimitOptions(max_body_bytes=64))
    add_http_metrics(app, HTTPMetrics(registry))
    return app


def samples(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """{'{labels}': value} of one series, from the exposition text a scrape reads."""
    out = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) :].rsplit(" ", 1)
            out[labels] = float(value)
    return out


@pytest.fixture
async def served() -> tuple[httpx.AsyncClient, CollectorRegistry]:
    registry = CollectorRegistry()
    transport = httpx.ASGITransport(app=make_app(registry))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client, registry


async def test_latency_is_per_route_template_and_status(served) -> None:
    client, registry = served
    for thing_id in ("a", "b", "c"):
        assert (await client.get(f"/things/{thing_id}", headers=ADMIN_TOKEN)).status_code == 200
    assert (await client.get("/nowhere", headers=ADMIN_TOKEN)).status_code == 404
    counts = samples(registry, "vendue_http_request_duration_seconds_count")
    assert counts == {
        '{method="GET",route="/things/{thing_id}",status="200"}': 3.0,
        '{method="GET",route="unmatched",status="404"}': 1.0,
    }, counts


async def test_refusals_are_counted_by_reason(served) -> None:
    client, registry = served
    assert (await client.get("/things/a")).status_code == 401  # no identity: the authorization's reason
    assert (await client.get("/things/a", headers={"Authorization": "Bearer nobody"})).status_code == 401
    assert (await client.post("/things", json={"size": "big"}, headers=ADMIN_TOKEN)).status_code == 422
    assert (
        await client.post("/things", json={"size": 1, "pad": "x" * 100}, headers=ADMIN_TOKEN)
    ).status_code == 413
    assert (await client.post("/writes?token=3", headers=ADMIN_TOKEN)).status_code == 409
    assert (await client.post("/writes?token=9", headers=ADMIN_TOKEN)).status_code == 429
    assert (await client.get("/readyz")).status_code == 503  # not ready is an answer, not a refusal
    refused = samples(registry, "vendue_refused_requests_total")
    assert refused == {
        '{reason="no_identity"}': 1.0,
        '{reason="bad_token"}': 1.0,
        '{reason="invalid"}': 1.0,
        '{reason="too_large"}': 1.0,
        '{reason="fenced"}': 1.0,
        '{reason="quota"}': 1.0,
    }, refused
    # Refused before any route ran, still timed under the route's template.
    counts = samples(registry, "vendue_http_request_duration_seconds_count")
    assert counts['{method="GET",route="/things/{thing_id}",status="401"}'] == 2.0, counts
    assert counts['{method="POST",route="/things",status="413"}'] == 1.0, counts
