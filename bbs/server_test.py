"""The BBS runtime opens its database as its settings say: SQLite's `synchronous` pragma in force on the
connections the running BBS reads and writes with is FULL by default and NORMAL when asked for."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from bbs.server import running_bbs
from bbs.settings import BBSSettings

# PRAGMA synchronous answers a number: 1 NORMAL, 2 FULL.
PRAGMA_VALUES = {"normal": 1, "full": 2}


def unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("no auctioneer in this test", request=request)


@pytest.mark.parametrize("given", [None, "full", "normal"])
async def test_sqlite_synchronous_in_force_on_the_bbs_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str | None
) -> None:
    monkeypatch.delenv("VENDUE_SQLITE_SYNCHRONOUS", raising=False)
    settings = BBSSettings(data_dir=tmp_path, **({"sqlite_synchronous": given} if given else {}))
    expected = PRAGMA_VALUES[given or "full"]
    client = httpx.AsyncClient(transport=httpx.MockTransport(unreachable))
    async with running_bbs(settings, converge=False, client=client) as bbs:
        async with bbs.store.read() as tx:
            read = (await tx.connection.exec_driver_sql("PRAGMA synchronous")).scalar()
        async with bbs.store.write() as tx:
            written = (await tx.connection.exec_driver_sql("PRAGMA synchronous")).scalar()
    assert (read, written) == (expected, expected), f"expected {expected} for {given or 'the default'}"


def test_the_environment_chooses_when_no_flag_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VENDUE_SQLITE_SYNCHRONOUS", "normal")
    assert BBSSettings().sqlite_synchronous == "normal"
