"""Completion callbacks carry no cluster identity: a callback URL is whatever the task's author wrote, so the
BBS must never POST there as role bbs (its certificate opens every rep's /stop and the auctioneer's
/v1/tasks). They are verified against the system's trust store, or the `callback_ca` bundle when given,
never against the cluster CA by default. Real TLS servers, real handshakes."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bbs.server import running_bbs
from bbs.settings import BBSSettings
from common.tls import TLSFiles, init_ca, issue, server_context

TASK = {"task_guid": "t1", "state": "COMPLETED", "failed": False}


class Target:
    """A TLS callback receiver that asks for a client certificate (trusting the cluster CA, so that the
    BBS's would be accepted) and records what each caller presented (None: no certificate)."""

    def __init__(self) -> None:
        self.presented: list[bytes | None] = []
        self.url = ""


@asynccontextmanager
async def target(files: TLSFiles) -> AsyncIterator[Target]:
    recorded = Target()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        recorded.presented.append(writer.get_extra_info("ssl_object").getpeercert(binary_form=True))
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
        await reader.readexactly(int(length.group(1)) if length else 0)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context(files))
    recorded.url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}/done"
    async with server:
        yield recorded


@pytest.fixture
def cluster(tmp_path: Path) -> Path:
    certs = tmp_path / "cluster"
    init_ca(certs)
    issue(certs, role="bbs", name="bbs")
    issue(certs, role="reader", name="receiver")  # a callback target's certificate from the cluster CA
    return certs


@pytest.fixture
def other_ca(tmp_path: Path) -> Path:
    """A CA apart from the cluster's, as a public CA or a company's own is."""
    certs = tmp_path / "other"
    init_ca(certs, common_name="someone else's CA")
    issue(certs, role="reader", name="receiver")
    return certs


def settings(tmp_path: Path, cluster: Path, **options: object) -> BBSSettings:
    bbs = TLSFiles.in_dir(cluster, "bbs")
    return BBSSettings(data_dir=tmp_path, database_url=f"sqlite+aiosqlite:///{tmp_path / 'bbs.db'}",
                       tls_cert=bbs.cert, tls_key=bbs.key, tls_ca=bbs.ca, send_attempts=1,
                       **options)  # type: ignore[arg-type]


def receiver(certs: Path, cluster: Path) -> TLSFiles:
    """The receiver's certificate from `certs`; it asks callers for one from the cluster CA."""
    own = TLSFiles.in_dir(certs, "receiver")
    return TLSFiles(own.cert, own.key, cluster / "ca.pem")


async def test_a_callback_presents_no_client_certificate(
    tmp_path: Path, cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The system trust store (OpenSSL reads SSL_CERT_FILE) trusts the cluster CA here, so the handshake
    # completes whichever client the BBS picks and the receiver sees what it presents.
    monkeypatch.setenv("SSL_CERT_FILE", str(cluster / "ca.pem"))
    async with target(receiver(cluster, cluster)) as rec, running_bbs(settings(tmp_path, cluster),
                                                                      converge=False) as bbs:
        assert await bbs.outbound.task_callback(rec.url, TASK)
    assert rec.presented == [None], "the callback was POSTed with a client certificate (as role bbs)"


async def test_a_callback_to_a_server_of_the_callback_ca_is_delivered(
    tmp_path: Path, cluster: Path, other_ca: Path
) -> None:
    async with target(receiver(other_ca, cluster)) as rec, running_bbs(
        settings(tmp_path, cluster, callback_ca=other_ca / "ca.pem"), converge=False
    ) as bbs:
        assert await bbs.outbound.task_callback(rec.url, TASK)
    assert rec.presented == [None]


@pytest.mark.parametrize("callback_ca", ["other", None])
async def test_a_callback_to_a_server_of_the_cluster_ca_only_is_refused(
    tmp_path: Path, cluster: Path, other_ca: Path, callback_ca: str | None
) -> None:
    """Neither the callback_ca bundle nor the system's store holds the cluster CA: the handshake fails."""
    options = {"callback_ca": other_ca / "ca.pem"} if callback_ca else {}
    async with target(receiver(cluster, cluster)) as rec, running_bbs(
        settings(tmp_path, cluster, **options), converge=False
    ) as bbs:
        assert not await bbs.outbound.task_callback(rec.url, TASK)
    assert rec.presented == []


def test_an_unreadable_callback_ca_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    from bbs.outbound import callback_http_client
    from common.tls import CertError

    with pytest.raises(CertError, match="callback_ca"):
        callback_http_client(1.0, tmp_path / "missing.pem")
