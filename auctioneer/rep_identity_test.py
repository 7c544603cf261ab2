"""Over TLS the auctioneer sends a request about some cells only to the server whose certificate is the
rep of those cells: a rep_url is whatever a rep heartbeated, and must not lead the auctioneer, presenting
its certificate, to another service or another cell's rep. Real TLS listeners, real handshakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from auctioneer.clients import RepClients, RepUnreachable
from common.tls import TLSFiles, client_context, init_ca, issue
from tests.support.tls_listener import tls_listener

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    init_ca(directory)
    issue(directory, role="auctioneer", name="auctioneer")
    issue(directory, role="rep", name="rep-1", cells=["cell-1"])
    issue(directory, role="rep", name="sim-host", cell_prefixes=["sim-"])
    issue(directory, role="rep", name="rep-2", cells=["cell-2"])
    issue(directory, role="reader", name="someone")
    issue(directory, role="bbs", name="bbs")
    return directory


def clients(certs: Path) -> RepClients:
    return RepClients(timeout=5, ssl_context=client_context(TLSFiles.in_dir(certs, "auctioneer")))


@pytest.mark.parametrize("impostor", ["someone", "bbs", "rep-2"])
async def test_state_and_work_go_to_no_server_but_the_cells_rep(certs: Path, impostor: str) -> None:
    async with tls_listener(TLSFiles.in_dir(certs, impostor)) as listener, clients(certs) as reps:
        with pytest.raises(RepUnreachable, match="not a rep's|does not name cell 'cell-1'"):
            await reps.get(listener.url + "/state?lrps=counts", cells=["cell-1"])
        with pytest.raises(RepUnreachable, match="not a rep's|does not name cell 'cell-1'"):
            await reps.post_json(listener.url + "/work", b'{"cells":{}}', cells=["cell-1"])
    assert listener.requests == [], f"the auctioneer sent {impostor}'s listener a request"


async def test_the_cells_rep_is_talked_to_and_a_kept_connection_is_checked_per_request(certs: Path) -> None:
    async with tls_listener(TLSFiles.in_dir(certs, "rep-1")) as listener, clients(certs) as reps:
        assert (await reps.get(listener.url + "/state", cells=["cell-1"])).status_code == 200
        with pytest.raises(RepUnreachable, match="does not name cell 'cell-2'"):
            await reps.post_json(listener.url + "/work", b"{}", cells=["cell-1", "cell-2"])
        assert (await reps.post_json(listener.url + "/work", b"{}", cells=["cell-1"])).status_code == 200
    assert [r.split(b" ", 1)[0] for r in listener.requests] == [b"GET", b"POST"]


async def test_a_simulated_hosts_certificate_speaks_for_its_prefix(certs: Path) -> None:
    async with tls_listener(TLSFiles.in_dir(certs, "sim-host")) as listener, clients(certs) as reps:
        assert (await reps.get(listener.url + "/state", cells=["sim-0", "sim-1"])).status_code == 200
        with pytest.raises(RepUnreachable):
            await reps.get(listener.url + "/state", cells=["cell-1"])
    assert len(listener.requests) == 1
