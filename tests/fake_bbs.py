"""The one fake BBS of the process tests (the rep's and the auctioneer's), served over real HTTP by uvicorn
on a free loopback port inside the test's event loop, over HTTPS when given a server TLS context.

It accepts and records what reps send (heartbeats, lifecycle reports) and answers as the BBS does: a
heartbeat names the cells among those reported that are `cordoned`, a lifecycle report has the claims and
running reports of `replaced` instance guids refused (bbs/api.py, bbs/lifecycle.py); lists cells (a
FakeReps' presences and `extra_cells`); keeps the "auctioneer" lease as the BBS does (POST takes or renews
it, a new holder under a newer token; DELETE releases it; GET answers it while unexpired, else 404), or
answers 404 without the lease API; verifies the bearer tokens in `tokens`; records placement-failure reports
(409 for a fencing token older than the lease's); and counts who called what (over HTTPS, by client
certificate). While `unavailable` (an outage) it answers every request 503 and records nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from common.models import (
    AuctionReport,
    CellLifecycle,
    CellPresence,
    CellPresences,
    HostLifecycle,
    Lease,
    LeaseRequest,
    TokenVerify,
)
from tests.auctioneer.fakes import FakeReps, caller_of, serving


@dataclass
class FakeBBS:
    reps: FakeReps | None = None
    extra_cells: list[CellPresence] = field(default_factory=list)
    cells_calls: int = 0
    heartbeats: list[CellPresence] = field(default_factory=list)
    lifecycles: list[tuple[str, CellLifecycle]] = field(default_factory=list)
    failure_reports: list[AuctionReport] = field(default_factory=list)  # POST /v1/auctions, one per auction
    failure_posts: int = 0
    fail_reports_times: int = 0  # answer 503 to this many auction report POSTs first
    # The "auctioneer" lease, as the BBS keeps it; lease_api=False answers 404 (a BBS without leases).
    lease_api: bool = True
    lease: Lease = field(default_factory=lambda: Lease(held=False, owner="", token=0, expires_at=0.0))
    lease_posts: int = 0
    lease_lookups: int = 0  # GET /v1/leases/{name}: a rep checking a fencing token
    tokens: dict[str, tuple[str, str]] = field(default_factory=dict)  # bearer token -> (role, name)
    callers: Counter = field(default_factory=Counter)  # (caller_of, "METHOD /path") -> requests
    cordoned: set[str] = field(default_factory=set)  # cells the heartbeat answer names cordoned
    replaced: set[str] = field(default_factory=set)  # instance guids replaced elsewhere: reports refused
    unavailable: bool = False  # an outage: 503 to everything, nothing recorded
    # While set to an Event, a heartbeat's answer is made at once but sent only once the event is set: an
    # answer overtaken by what happens meanwhile. heartbeats_held counts those held.
    heartbeat_gate: asyncio.Event | None = None
    heartbeats_held: int = 0
    url: str = ""

    def hold_lease(self, token: int, owner: str = "a1", ttl_s: float = 3600.0) -> None:
        """The "auctioneer" lease held by `owner` under `token`: the leader a rep test plays."""
        self.lease = Lease(held=True, owner=owner, token=token, expires_at=time.time() + ttl_s)

    def lifecycle_of(self, cell_id: str) -> list[CellLifecycle]:
        return [body for cid, body in self.lifecycles if cid == cell_id]

    def beats_of(self, cell_id: str) -> list[CellPresence]:
        return [p for p in self.heartbeats if p.cell_id == cell_id]

    def routes(self) -> set[str]:
        """Every route called ("METHOD /path")."""
        return {route for _, route in self.callers}

    def calls(self, route: str) -> int:
        """How many requests of a route ("METHOD /path") it answered, from any caller."""
        return sum(n for (_, called), n in self.callers.items() if called == route)

    def refused(self, report: CellLifecycle) -> dict[str, list]:
        """The answer for one cell's report: what the BBS refuses of an instance replaced elsewhere (its claim
        and its running report, as InstanceRefs); the rep stops it."""
        refs = [r for r in [*report.claimed, *report.running] if r.instance_guid in self.replaced]
        refused = [{"process_guid": r.process_guid, "index": r.index, "instance_guid": r.instance_guid}
                   for r in refs]
        return {"refused": refused, "refused_tasks": []}

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def record_caller(request: Request, call_next):
            if self.unavailable:
                return JSONResponse({"detail": "unavailable"}, status_code=503)
            self.callers[(caller_of(request), f"{request.method} {request.url.path}")] += 1
            return await call_next(request)

        @app.put("/v1/cells")
        async def heartbeats(request: Request) -> dict[str, list[str]]:
            cells = CellPresences.model_validate_json(await request.body()).cells
            self.heartbeats.extend(cells)
            answer = {"cordoned": [p.cell_id for p in cells if p.cell_id in self.cordoned]}
            if (gate := self.heartbeat_gate) is not None:
                self.heartbeats_held += 1
                await gate.wait()
            return answer

        @app.post("/v1/lifecycle")
        async def lifecycle(request: Request) -> dict[str, Any]:
            body = HostLifecycle.model_validate_json(await request.body())
            self.lifecycles.extend(body.cells.items())
            return {"cells": {cell_id: self.refused(report) for cell_id, report in body.cells.items()}}

        @app.get("/v1/cells")
        async def cells() -> dict:
            self.cells_calls += 1
            present = (self.reps.presences() if self.reps else []) + self.extra_cells
            return {"items": [p.model_dump(mode="json") for p in present]}

        @app.post("/v1/leases/{name}")
        async def take_lease(name: str, body: LeaseRequest) -> Response:
            self.lease_posts += 1
            if not self.lease_api or name != "auctioneer":
                return JSONResponse({"detail": "Not Found"}, status_code=404)
            now, lease = time.time(), self.lease
            if lease.owner != body.owner and lease.expires_at <= now:  # free: a new term, a newer token
                lease = Lease(
                    held=True, owner=body.owner, url=body.url, token=lease.token + 1, expires_at=0.0
                )
            if lease.owner == body.owner:
                lease = lease.model_copy(update={"url": body.url, "expires_at": now + body.ttl_s})
            self.lease = lease
            return JSONResponse({**lease.model_dump(), "held": lease.owner == body.owner})

        @app.get("/v1/leases/{name}")
        async def get_lease(name: str) -> Response:
            self.lease_lookups += 1
            if not self.lease_api or name != "auctioneer" or self.lease.expires_at <= time.time():
                return JSONResponse({"detail": f"nobody holds the lease {name!r}"}, status_code=404)
            return JSONResponse({**self.lease.model_dump(), "held": True})

        @app.delete("/v1/leases/{name}", status_code=204)
        async def release_lease(name: str, owner: str, token: int) -> Response:
            if (owner, token) == (self.lease.owner, self.lease.token):
                self.lease = self.lease.model_copy(update={"expires_at": 0.0})
            return Response(status_code=204)

        @app.post("/v1/tokens/verify")
        async def verify_token(body: TokenVerify) -> Response:
            if body.token not in self.tokens:  # as the real BBS answers (bbs/api.py)
                return JSONResponse(
                    {"detail": "no valid token: unknown, expired or revoked"}, status_code=404
                )
            role, name = self.tokens[body.token]
            return JSONResponse({"role": role, "name": name})

        @app.post("/v1/auctions")
        async def auction_report(request: Request) -> Response:
            self.failure_posts += 1
            if self.fail_reports_times > 0:
                self.fail_reports_times -= 1
                return JSONResponse({"detail": "unavailable"}, status_code=503)
            report = AuctionReport.model_validate_json(await request.body())
            if report.fencing_token < self.lease.token:
                return JSONResponse(
                    {"detail": f"stale fencing token {report.fencing_token}"}, status_code=409
                )
            self.failure_reports.append(report)
            return Response(status_code=204)

        return app


@contextlib.asynccontextmanager
async def fake_bbs(
    reps: FakeReps | None = None, ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[FakeBBS]:
    """A FakeBBS (listing `reps`' cells) for the block, over HTTPS with `ssl_context`
    (common.tls.server_context)."""
    bbs = FakeBBS(reps=reps)
    async with serving(bbs.app(), ssl_context) as url:
        bbs.url = url
        yield bbs
