"""NATS with TLS and per-role permissions (docs/security.md, "NATS") against the real nats-server binary.

One server for the module, started the way `vendue up` will: the server's own serving-only certificate,
one user per client certificate in the directory. Each identity is a raw nats-py client (as a component
connects: TLS first, its certificate) that records the server's asynchronous errors: a permission
violation does not close the connection, the server drops the message and says so (-ERR), so a refusal
is asserted by waiting for that error, and "nothing arrived" by a round trip on the receiving connection
after a legitimate message did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import stat
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from cryptography import x509
from nats.aio.client import Client
from nats.aio.msg import Msg

from common.tls import TLSFiles, client_context, init_ca, issue
from common.transport.nats_connection import NatsConnection
from common.transport.nats_server import (
    CONFIG_FILE,
    NatsServer,
    certificate_identities,
    issue_server_certificate,
    server_config,
)
from common.transport.subjects import (
    AUCTIONEER_LRPS,
    AUCTIONEER_QUEUE,
    EVENTS_ALL,
    cells_state_subject,
    event_subject,
    rep_subject,
    rep_wildcard,
)
from tests.rep.fakes import DEADLINE_S
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(120)

WAIT_S = 10.0
# Client identities `vendue up` would issue; rep-0 hosts two cells (still one state reply per request).
CLIENTS = {
    "bbs": {"role": "bbs"},
    "auctioneer": {"role": "auctioneer"},
    "rep-0": {"role": "rep", "cells": ["cell-0a", "cell-0b"]},
    "rep-1": {"role": "rep", "cells": ["cell-1"]},
    "ops": {"role": "admin"},
    "viewer": {"role": "reader"},
}


def issue_cluster(directory: Path) -> Path:
    init_ca(directory)
    issue_server_certificate(directory)
    for name, how in CLIENTS.items():
        issue(directory, name=name, **how)
    return directory


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return issue_cluster(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    logs = tmp_path_factory.mktemp("nats")
    nats_server = NatsServer(tls=TLSFiles.in_dir(pki, "nats"), users=certificate_identities(pki),
                             log_path=logs / "nats-server.log").start()
    try:
        yield nats_server
    finally:
        nats_server.stop()


# --- helpers ------------------------------------------------------------------------------------------


@dataclass
class Peer:
    """One identity's connection, the server's errors to it, and what its subscriptions received."""

    name: str
    nc: Client = field(init=False)
    errors: list[str] = field(default_factory=list)
    received: list[str] = field(default_factory=list)

    async def on_error(self, exc: Exception) -> None:
        self.errors.append(str(exc))

    async def record(self, msg: Msg) -> None:
        self.received.append(msg.subject)

    async def refused(self, what: str) -> None:
        """Wait for the server's `Permissions Violation for <what>` (e.g. `publish to "x"`)."""
        wanted = f"permissions violation for {what}".lower()
        await eventually(lambda: any(wanted in e.lower() for e in self.errors),
                         DEADLINE_S, f"{self.name}: {wanted!r}", lambda: self.errors)


def context_for(pki: Path, name: str) -> ssl.SSLContext:
    return client_context(TLSFiles.in_dir(pki, name))


async def open_peer(server: NatsServer, pki: Path, name: str) -> Peer:
    peer = Peer(name)
    peer.nc = await nats.connect(
        server.url, name=name, tls=context_for(pki, name), tls_handshake_first=True, error_cb=peer.on_error,
        allow_reconnect=False, connect_timeout=5,
    )
    return peer


@contextlib.asynccontextmanager
async def peers(server: NatsServer, pki: Path, *names: str) -> AsyncIterator[dict[str, Peer]]:
    opened: dict[str, Peer] = {}
    try:
        for name in names:
            opened[name] = await open_peer(server, pki, name)
        yield opened
    finally:
        for peer in opened.values():
            with contextlib.suppress(Exception):
                await peer.nc.close()


async def refused_connection(
    server: NatsServer, context: ssl.SSLContext, *, tls_first: bool = True
) -> BaseException:
    """Connect once, no retry; return what stopped it (fail if it connected)."""
    try:
        nc = await nats.connect(server.url, tls=context, tls_handshake_first=tls_first, allow_reconnect=False,
                                max_reconnect_attempts=0, connect_timeout=3)
    except Exception as exc:  # a TLS alert, a reset, or the server's -ERR: the test says which it expects
        return exc
    await nc.close()
    raise AssertionError("expected the server to refuse this connection; it was accepted")


def replier(nc: Client, *bodies: bytes):
    async def reply(msg: Msg) -> None:
        for body in bodies:
            await nc.publish(msg.reply, body)
    return reply


# --- who may connect ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tls_first", [True, False], ids=["tls-first", "info-then-upgrade"])
async def test_a_connection_without_a_client_certificate_is_refused(
    server: NatsServer, pki: Path, tls_first: bool
):
    no_certificate = client_context(ca=pki / "ca.pem")  # trusts the server, presents nothing
    refusal = await refused_connection(server, no_certificate, tls_first=tls_first)
    assert isinstance(refusal, OSError), f"expected the TLS handshake to fail; got {refusal!r}"
    if tls_first:
        assert "CERTIFICATE_REQUIRED" in str(refusal), refusal
    async with peers(server, pki, "rep-0") as opened:  # the same server takes a certificate it knows
        assert opened["rep-0"].nc.is_connected


async def test_a_certificate_from_another_ca_is_refused(server: NatsServer, pki: Path, tmp_path: Path):
    init_ca(tmp_path)
    issue(tmp_path, role="rep", name="rep-0", cells=["cell-0a"])  # the same subject as a real user
    foreign = client_context(ca=pki / "ca.pem")
    foreign.load_cert_chain(tmp_path / "rep-0.pem", tmp_path / "rep-0-key.pem")
    refusal = await refused_connection(server, foreign)
    assert "UNKNOWN_CA" in str(refusal), f"expected the server to reject the issuer; got {refusal!r}"


async def test_the_servers_own_certificate_is_no_client(server: NatsServer, pki: Path):
    assert "CN=nats,OU=reader,O=vendue" not in [u["user"] for u in _users(server)]
    refusal = await refused_connection(server, context_for(pki, "nats"))
    assert "BAD_CERTIFICATE" in str(refusal), (
        f"expected serverAuth-only to fail the handshake; got {refusal!r}")


async def test_a_certificate_issued_later_is_refused_until_a_reload_names_it(tmp_path: Path):
    pki = issue_cluster(tmp_path / "pki")
    with NatsServer(tls=TLSFiles.in_dir(pki, "nats"), users=certificate_identities(pki),
                    log_path=tmp_path / "nats-server.log") as late_server:
        async with peers(late_server, pki, "bbs") as opened:
            issue(pki, role="rep", name="rep-9", cells=["cell-9"])
            refusal = await refused_connection(late_server, context_for(pki, "rep-9"))
            assert "authorization violation" in str(refusal).lower(), (
                f"expected no such user; got {refusal!r}")

            late_server.reload(certificate_identities(pki))
            # The server applies the new file moments after SIGHUP: connect until it admits rep-9.
            admitted = await eventually(
                lambda: open_peer(late_server, pki, "rep-9"), WAIT_S, "rep-9 to connect after the reload",
                interval=0, retry_on=(Exception,),
            )
            await admitted.nc.close()
            await opened["bbs"].nc.flush(timeout=5)  # the others' connections outlive the reload
            assert opened["bbs"].nc.is_connected


# --- what each role may do ----------------------------------------------------------------------------


async def test_a_rep_publishes_only_replies_and_hears_only_its_own_subjects(server: NatsServer, pki: Path):
    async with peers(server, pki, "rep-0", "rep-1", "auctioneer", "bbs", "viewer") as p:
        rep0, rep1, auctioneer, bbs, viewer = p.values()
        answer = replier(rep1.nc, b"taken")

        async def rep1_serves(msg: Msg) -> None:  # one subscription, as a rep has (its one reply allowed)
            await rep1.record(msg)
            await answer(msg)

        await rep1.nc.subscribe(rep_wildcard("rep-1"), cb=rep1_serves)
        await viewer.nc.subscribe(EVENTS_ALL, cb=viewer.record)
        for peer in (rep1, viewer):
            await peer.nc.flush()

        forged = [rep_subject("rep-1", "work"), AUCTIONEER_LRPS, event_subject("x"), "_INBOX.forged"]
        for subject in forged:
            await rep0.nc.publish(subject, b"forged")
            await rep0.refused(f'publish to "{subject}"')
        await rep0.nc.subscribe(rep_wildcard("rep-1"), cb=rep0.record)
        await rep0.refused(f'subscription to "{rep_wildcard("rep-1")}"')

        # The forged messages went nowhere: the legitimate senders' do arrive, and only those.
        assert (await auctioneer.nc.request(rep_subject("rep-1", "work"), b"{}", timeout=5)).data == b"taken"
        await bbs.nc.publish(event_subject("lrp_changed"), b"{}")
        await eventually(lambda: viewer.received,
                         DEADLINE_S, "the BBS's event at the reader", lambda: viewer.received)
        for peer in (rep0, rep1, viewer):
            await peer.nc.flush()  # a round trip: whatever the server sent them before has arrived
        assert rep1.received == [rep_subject("rep-1", "work")]
        assert viewer.received == [event_subject("lrp_changed")]
        assert rep0.received == [], "rep-0 must not hear rep-1's subjects"


async def test_the_auctioneer_sends_work_and_state_requests_and_every_reply_comes_back(
    server: NatsServer, pki: Path
):
    async with peers(server, pki, "auctioneer", "rep-0", "rep-1") as p:
        auctioneer, rep0, rep1 = p.values()
        await rep0.nc.subscribe(rep_subject("rep-0", "work"), cb=replier(rep0.nc, b"rep-0 took it"))
        # One reply per process, all its cells in it; a second reply to the same request is not allowed.
        await rep0.nc.subscribe(cells_state_subject("rep-0"),
                                cb=replier(rep0.nc, b"cell-0a,cell-0b", b"again"))
        await rep1.nc.subscribe(cells_state_subject("rep-1"), cb=replier(rep1.nc, b"cell-1"))
        for peer in (rep0, rep1):
            await peer.nc.flush()

        reply = await auctioneer.nc.request(rep_subject("rep-0", "work"), b"{}", timeout=5)
        assert reply.data == b"rep-0 took it"

        states: list[bytes] = []

        async def gather(msg: Msg) -> None:
            states.append(msg.data)

        inbox = auctioneer.nc.new_inbox()
        await auctioneer.nc.subscribe(inbox + ".*", cb=gather)
        for index, rep in enumerate(("rep-0", "rep-1")):
            await auctioneer.nc.publish(cells_state_subject(rep), b"", reply=f"{inbox}.{index}")
        await rep0.refused(f'publish to "{inbox}.0"')
        await eventually(lambda: len(states) == 2,
                         DEADLINE_S, "a state reply from each rep process", lambda: states)
        await auctioneer.nc.flush()  # a round trip: a reply the server let through has arrived by now
        assert sorted(states) == [b"cell-0a,cell-0b", b"cell-1"]
        assert len(rep0.errors) == 1 and rep1.errors == [], "first replies are within the reps' permissions"

        for subject in (AUCTIONEER_LRPS, rep_subject("rep-0", "stop"), rep_subject("rep-0", "cordon"),
                        event_subject("x")):
            await auctioneer.nc.publish(subject, b"{}")
            await auctioneer.refused(f'publish to "{subject}"')
        await auctioneer.nc.subscribe(rep_wildcard("rep-0"))
        await auctioneer.refused(f'subscription to "{rep_wildcard("rep-0")}"')


async def test_the_bbs_sends_start_requests_to_the_auctioneers_queue_and_stops_to_reps(
    server: NatsServer, pki: Path
):
    async with peers(server, pki, "bbs", "auctioneer", "rep-0") as p:
        bbs, auctioneer, rep0 = p.values()
        await auctioneer.nc.subscribe(AUCTIONEER_LRPS, queue=AUCTIONEER_QUEUE,
                                      cb=replier(auctioneer.nc, json.dumps({"accepted": 1}).encode()))
        await rep0.nc.subscribe(rep_wildcard("rep-0"), cb=replier(rep0.nc, b'{"found": true}'))
        for peer in (auctioneer, rep0):
            await peer.nc.flush()

        reply = await bbs.nc.request(AUCTIONEER_LRPS, b"[]", timeout=5)
        assert json.loads(reply.data) == {"accepted": 1}
        for verb in ("stop", "cordon"):
            reply = await bbs.nc.request(rep_subject("rep-0", verb), b"{}", timeout=5)
            assert json.loads(reply.data) == {"found": True}, verb
        assert auctioneer.errors == [] and rep0.errors == []

        for subject in (rep_subject("rep-0", "work"), cells_state_subject("rep-0")):
            await bbs.nc.publish(subject, b"{}")
            await bbs.refused(f'publish to "{subject}"')
        await bbs.nc.subscribe(AUCTIONEER_LRPS)
        await bbs.refused(f'subscription to "{AUCTIONEER_LRPS}"')


@pytest.mark.parametrize("name", ["ops", "viewer"], ids=["admin", "reader"])
async def test_admin_and_reader_hear_events_and_publish_nothing(server: NatsServer, pki: Path, name: str):
    async with peers(server, pki, name, "bbs") as p:
        person, bbs = p[name], p["bbs"]
        await person.nc.subscribe(EVENTS_ALL, cb=person.record)
        await person.nc.flush()
        await bbs.nc.publish(event_subject("task_changed"), b"{}")
        await eventually(lambda: person.received == [event_subject("task_changed")],
                         DEADLINE_S, "the BBS's event",
                         lambda: person.received)

        for subject in (event_subject("x"), rep_subject("rep-0", "stop"), AUCTIONEER_LRPS):
            await person.nc.publish(subject, b"{}")
            await person.refused(f'publish to "{subject}"')
        for subject in (rep_wildcard("rep-0"), "_INBOX.>"):
            await person.nc.subscribe(subject)
            await person.refused(f'subscription to "{subject}"')


# --- the component side: NatsConnection with TLS ------------------------------------------------------


@pytest.mark.parametrize("scheme", ["tls", "nats"])
async def test_a_component_connects_with_either_url_scheme_and_its_refusals_are_counted(
    server: NatsServer, pki: Path, scheme: str, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.WARNING, logger="common.nats")
    conn = NatsConnection(f"{scheme}://127.0.0.1:{server.port}", name="rep-0",
                          tls=TLSFiles.in_dir(pki, "rep-0"))
    conn.start()
    try:
        await conn.wait_connected(WAIT_S)
        assert conn.status()["tls"] is True
        for _ in range(3):
            await conn.client.publish(AUCTIONEER_LRPS, b"[]")
        await eventually(lambda: conn.permission_violations == 3, DEADLINE_S, "three refusals counted",
                         lambda: conn.status())
        warnings = [r for r in caplog.records if "not permitted" in r.getMessage()]
        assert len(warnings) == 1, "one warning, not one per refused message"
        assert conn.connected, "a refused message does not cost the connection"
    finally:
        await conn.close()


async def test_a_component_with_tls_never_speaks_plaintext_even_when_the_server_offers_it(pki: Path):
    """A man in the middle answering with a plaintext INFO (no tls_required) must not get a CONNECT:
    the client's first bytes are a TLS ClientHello (record type 0x16)."""
    received = bytearray()

    async def fake_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"server_id":"fake","version":"2.10.0","proto":1,"max_payload":1048576}\r\n')
        await writer.drain()
        with contextlib.suppress(Exception):
            received.extend(await reader.read(4096))
        writer.close()

    fake = await asyncio.start_server(fake_server, "127.0.0.1", 0)
    port = fake.sockets[0].getsockname()[1]
    conn = NatsConnection(f"nats://127.0.0.1:{port}", name="rep-0", tls=TLSFiles.in_dir(pki, "rep-0"),
                          max_backoff=0.2)
    conn.start()
    try:
        await eventually(lambda: received,
                         DEADLINE_S, "the client's first bytes at the fake server", conn.status)
        assert received[0] == 0x16, f"expected a TLS handshake first; got {bytes(received[:16])!r}"
        assert b"CONNECT" not in received
        await eventually(lambda: conn.failed_attempts >= 1, DEADLINE_S, "the attempt to fail", conn.status)
        assert not conn.connected
    finally:
        await conn.close()
        fake.close()
        await fake.wait_closed()


# --- the generated configuration ----------------------------------------------------------------------


def _users(server: NatsServer) -> list[dict]:
    assert server.config_path is not None
    return json.loads(server.config_path.read_text())["authorization"]["users"]


def test_the_configuration_is_private_and_names_every_client_certificate_by_its_subject(server: NatsServer,
                                                                                      pki: Path):
    assert server.config_path is not None and server.config_path.name == CONFIG_FILE
    assert stat.S_IMODE(server.config_path.stat().st_mode) == 0o600
    config = json.loads(server.config_path.read_text())
    assert "no_auth_user" not in config["authorization"], "anonymous connections must be refused"
    assert config["tls"]["verify_and_map"] is True
    subjects = {
        x509.load_pem_x509_certificate((pki / f"{name}.pem").read_bytes()).subject.rfc4514_string()
        for name in CLIENTS
    }
    assert {u["user"] for u in _users(server)} == subjects
    rep0 = next(u for u in _users(server) if u["user"] == "CN=rep-0,OU=rep,O=vendue")["permissions"]
    assert rep0["publish"] == {"deny": [">"]}
    assert rep0["subscribe"] == {"allow": ["vendue.cells.state.rep-0", "vendue.rep.rep-0.>"]}


def test_tls_mode_takes_no_shared_secret_and_users_need_tls(pki: Path, tmp_path: Path):
    files = TLSFiles.in_dir(pki, "nats")
    with pytest.raises(ValueError, match="tls"):
        NatsServer(tls=files, token="s3cret", config_dir=tmp_path)
    with pytest.raises(ValueError, match="users"):
        NatsServer(users=certificate_identities(pki))
    with pytest.raises(ValueError, match="config_dir"):
        NatsServer(tls=files)
    config = server_config(host="127.0.0.1", port=4222, tls=files, users=certificate_identities(pki) * 2)
    assert len(config["authorization"]["users"]) == len(CLIENTS), "one user per subject"
