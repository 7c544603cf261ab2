"""A cell's state is the state its own rep process sent (docs/security.md, "NATS"), against the real
nats-server with TLS and per-role permissions, the auctioneer's real gather (NatsCellStateSource).

rep-1 is stopped. A second connection with rep-0's certificate (a compromised cell) tries every way to
answer for cell-1: it subscribes to the state subjects of every process and replies to what it hears with
a state of cell-1 that names rep-1. The auction must not see cell-1: the server refuses it rep-1's subject,
and a cell-1 state in a reply to rep-0's own request is dropped and counted. Subjects are spelt out here
rather than imported, so that the test reads the same against any version of the code.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from auctioneer.metrics import Metrics
from auctioneer.nats_cells import NatsCellStateSource
from common.models import CellPresence, CellState, HostCellStates, ResourcesModel
from common.tls import TLSFiles, client_context, init_ca, issue
from common.transport.nats_connection import NatsConnection
from common.transport.nats_server import NatsServer, certificate_identities, issue_server_certificate
from tests.auctioneer.fakes import cell_state
from tests.rep.fakes import DEADLINE_S
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)

REP_OF = {"cell-0a": "rep-0", "cell-0b": "rep-0", "cell-1": "rep-1"}
STATE_SUBJECTS = ["vendue.cells.state", "vendue.cells.state.rep-0", "vendue.cells.state.rep-1",
                  "vendue.cells.state.>"]


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    directory = tmp_path / "pki"
    init_ca(directory)
    issue_server_certificate(directory)
    issue(directory, role="auctioneer", name="auctioneer")
    issue(directory, role="rep", name="rep-0", cells=["cell-0a", "cell-0b"])
    issue(directory, role="rep", name="rep-1", cells=["cell-1"])
    return directory


@pytest.fixture
def server(pki: Path, tmp_path: Path) -> Iterator[NatsServer]:
    with NatsServer(tls=TLSFiles.in_dir(pki, "nats"), users=certificate_identities(pki),
                    log_path=tmp_path / "nats-server.log") as running:
        yield running


@contextlib.asynccontextmanager
async def connected_as(server: NatsServer, pki: Path, name: str, errors: list[str]) -> AsyncIterator[Client]:
    async def on_error(exc: Exception) -> None:
        errors.append(str(exc).lower())

    nc = await nats.connect(server.url, name=name, tls=client_context(TLSFiles.in_dir(pki, name)),
                            tls_handshake_first=True, error_cb=on_error, allow_reconnect=False,
                            connect_timeout=5)
    try:
        yield nc
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


def states(*cells: CellState) -> bytes:
    return HostCellStates(cells=list(cells)).model_dump_json().encode()


def presences() -> list[CellPresence]:
    return [CellPresence.model_validate({**cell_state(cell_id).model_dump(), "rep_id": rep_id,
                                         "rep_url": "http://127.0.0.1:1"})
            for cell_id, rep_id in REP_OF.items()]


async def test_a_rep_cannot_answer_for_another_process_s_cell(server: NatsServer, pki: Path):
    genuine_errors: list[str] = []
    forger_errors: list[str] = []
    # The forged state: cell-1 empty and huge, so that an auction believing it would put everything there.
    forged = cell_state("cell-1", memory_mb=1 << 20)
    async with connected_as(server, pki, "rep-0", genuine_errors) as rep0, \
            connected_as(server, pki, "rep-0", forger_errors) as forger:
        async def answer_for_rep0(msg: Msg) -> None:
            await rep0.publish(msg.reply, states(cell_state("cell-0a"), cell_state("cell-0b")),
                               headers={"Vendue-Rep-Id": "rep-0"})

        async def forge(msg: Msg) -> None:
            await forger.publish(msg.reply, states(forged), headers={"Vendue-Rep-Id": "rep-1"})

        await rep0.subscribe("vendue.cells.state.rep-0", cb=answer_for_rep0)
        for subject in STATE_SUBJECTS:
            await forger.subscribe(subject, cb=forge)
        for nc in (rep0, forger):
            await nc.flush()

        auctioneer = NatsConnection(server.url, name="auctioneer", tls=TLSFiles.in_dir(pki, "auctioneer"))
        auctioneer.start()
        metrics = Metrics()
        try:
            await auctioneer.wait_connected(DEADLINE_S)

            async def list_cells() -> list[CellPresence]:
                return presences()

            # Long enough for every reply on a loaded machine: a forged one arriving after the fetch ended
            # would not be counted.
            fetched = await NatsCellStateSource(auctioneer, list_cells, metrics, timeout=3.0).fetch()
        finally:
            await auctioneer.close()

    used = {state.cell_id: state for state in fetched.states}
    assert "cell-1" not in used, f"the auction would use rep-0's word for cell-1: {used.get('cell-1')}"
    assert "cell-1" in fetched.dropped, fetched.dropped
    assert "vendue_auctioneer_forged_states_total 1.0" in metrics.exposition().decode(), (
        "the forged state, sent in reply to rep-0's own request, is counted")
    # The server refused the forger every state subject but its own.
    for subject in ("vendue.cells.state", "vendue.cells.state.rep-1", "vendue.cells.state.>"):
        wanted = f'permissions violation for subscription to "{subject}"'
        await eventually(lambda w=wanted: any(w in e for e in forger_errors), DEADLINE_S,  # type: ignore[misc]
                         f"the server to refuse {subject}", lambda: forger_errors)
    # The genuine path still works: rep-0's cells, as rep-0 reported them.
    assert set(used) == {"cell-0a", "cell-0b"}, fetched.dropped
    assert used["cell-0a"].total == ResourcesModel(memory_mb=8192, disk_mb=32768, containers=250)
    assert genuine_errors == [], genuine_errors
