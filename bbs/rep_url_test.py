"""A rep_url the BBS and the auctioneer would call must be a rep's: no link-local or metadata address is
taken at the heartbeat (common/urls.py's filter), and an https rep must present that cell's rep
certificate (bbs/outbound.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from common.tls import TLSFiles, init_ca, issue
from tests.support.tls_listener import tls_listener

from .conftest import Harness
from .metrics import BBSMetrics
from .outbound import Outbound
from .records import CellRecord
from .server import outbound_client
from .settings import BBSSettings


def presence(cell_id: str, rep_url: str) -> dict:
    return {"cell_id": cell_id, "zone": "z1", "rep_url": rep_url,
            "total": {"memory_mb": 4096, "disk_mb": 8192, "containers": 100}}


@pytest.mark.parametrize("rep_url", [
    "http://169.254.169.254/", "http://[fd00:ec2::254]/", "http://metadata.google.internal/",
    "https://169.254.10.1:1800", "http://2852039166/", "ftp://rep.example/",
])
async def test_a_heartbeat_naming_a_link_local_or_metadata_rep_url_is_422(h: Harness, rep_url: str) -> None:
    response = await h.http.put("/v1/cells", json={"cells": [presence("c1", "http://rep.example:1800"),
                                                             presence("c2", rep_url)]})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"][-1] == "rep_url"
    assert (await h.http.get("/v1/cells")).json() == {"items": []}, "nothing of the heartbeat was taken"


async def test_a_heartbeat_with_an_ordinary_rep_url_is_taken(h: Harness) -> None:
    response = await h.http.put("/v1/cells", json={"cells": [presence("c1", "https://10.0.0.5:1800")]})
    assert response.status_code == 200, response.text


# --- the BBS talks to a rep_url only when the server there is that cell's rep ----------------------------


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    init_ca(directory)
    issue(directory, role="bbs", name="bbs")
    issue(directory, role="rep", name="rep-1", cells=["cell-1"])
    issue(directory, role="rep", name="rep-2", cells=["cell-2"])
    issue(directory, role="reader", name="someone")
    issue(directory, role="auctioneer", name="auctioneer")
    return directory


@asynccontextmanager
async def outbound_of(tmp_path: Path, certs: Path) -> AsyncIterator[Outbound]:
    bbs = TLSFiles.in_dir(certs, "bbs")
    settings = BBSSettings(data_dir=tmp_path, tls_cert=bbs.cert, tls_key=bbs.key, tls_ca=bbs.ca)
    outbound = Outbound("https://auctioneer.test", BBSMetrics(), client=outbound_client(settings))
    try:
        yield outbound
    finally:
        await outbound.close()


def rep_cell(cell_id: str, rep_url: str) -> CellRecord:
    return CellRecord(cell_id, {"zone": "z1", "rep_url": rep_url, "rep_id": "r"}, expires_at=0.0)


@pytest.mark.parametrize("impostor", ["someone", "auctioneer", "rep-2"])
async def test_the_bbs_sends_nothing_to_a_rep_url_whose_server_is_not_that_cells_rep(
    tmp_path: Path, certs: Path, impostor: str
) -> None:
    async with tls_listener(TLSFiles.in_dir(certs, impostor)) as listener, outbound_of(tmp_path,
                                                                                        certs) as outbound:
        cell = rep_cell("cell-1", listener.url)
        outbound.stop_instance(cell, "web", "i-1")
        outbound.cancel_task(cell, "t-1")
        outbound.cordon_cell(cell, True)
        await outbound.drain(10)
        assert await outbound.cell_detail(cell, timeout=5) is None
        assert await outbound.cells_instances([cell]) == {}
    assert listener.requests == [], f"the BBS sent {impostor}'s listener a request as role bbs"


async def test_the_bbs_talks_to_the_cells_own_rep_and_checks_each_request_on_a_kept_connection(
    tmp_path: Path, certs: Path
) -> None:
    async with tls_listener(TLSFiles.in_dir(certs, "rep-1")) as listener, outbound_of(tmp_path,
                                                                                       certs) as outbound:
        outbound.stop_instance(rep_cell("cell-1", listener.url), "web", "i-1")
        await outbound.drain(10)
        assert [r.split(b" ", 2)[:2] for r in listener.requests] == [[b"POST", b"/stop"]]
        # cell-2's presence names rep-1's URL: the kept connection to rep-1 is not borrowed for it.
        outbound.stop_instance(rep_cell("cell-2", listener.url), "web", "i-2")
        await outbound.drain(10)
        assert len(listener.requests) == 1
