"""The store tests' fixture: a Store opened on each kind of database in turn (`database_url`)."""

from __future__ import annotations

import pytest

from bbs.store import Store


@pytest.fixture
async def store(database_url: str):
    opened = await Store.open(database_url)
    try:
        yield opened
    finally:
        await opened.close()
