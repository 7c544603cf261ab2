"""The `h` fixture: a BBS in-process on each kind of database (database_url), behind an ASGI client, its
outbound requests recorded (tests/support/bbs_harness.py); `bbs_http`: one that checks identities, as a
deployed BBS does, with nothing outbound."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bbs.api import create_app
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from tests.support.bbs_harness import AUCTIONEER, Harness, Recorder


@pytest.fixture
async def h(tmp_path: Path, database_url: str):
    rec = Recorder()
    settings = BBSSettings(
        data_dir=tmp_path,
        database_url=database_url,
        auctioneer_url=AUCTIONEER,
        send_attempts=1,
        presence_ttl=10,
        lease_ttl=1,  # a send to a dead auctioneer is retried for lease_ttl + 1 s before convergence's turn
    )
    outbound = httpx.AsyncClient(transport=httpx.MockTransport(rec.handle), timeout=5)
    async with running_bbs(settings, converge=False, client=outbound, callback_client=outbound) as bbs:
        transport = httpx.ASGITransport(app=create_app(bbs, insecure=True))
        async with httpx.AsyncClient(transport=transport, base_url="http://bbs", timeout=10) as http:
            yield Harness(bbs, http, rec)


@pytest.fixture
async def bbs_http(tmp_path: Path, database_url: str):
    """(the BBS, a client of it) with identities checked (not --insecure) and no convergence loop."""
    settings = BBSSettings(data_dir=tmp_path, database_url=database_url)
    async with running_bbs(settings, converge=False) as bbs:
        transport = httpx.ASGITransport(app=create_app(bbs, insecure=False))
        # https: the dashboard's session cookie is Secure, and a client keeps it for https only
        async with httpx.AsyncClient(transport=transport, base_url="https://bbs", timeout=10) as http:
            yield bbs, http
