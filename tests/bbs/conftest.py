"""Fixtures of the BBS process tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.bbs_process import BBSProcess


@pytest.fixture
def processes() -> Iterator[list[BBSProcess]]:
    """The BBS processes a test starts (it appends them), stopped when it ends, also when it fails."""
    started: list[BBSProcess] = []
    try:
        yield started
    finally:
        for bbs in started:
            bbs.stop()
