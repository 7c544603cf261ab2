"""A NATS cluster of three real nats-servers on loopback (common/transport/nats_server.py, `cluster_servers`):
routes between all three over mutual TLS, a message published on one server reaching a subscriber on
another; a certificate of the cluster CA that is not the route certificate cannot join as a route; and a
component given every server's URL that loses its server (killed) carries on through another, its
subscription restored.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from common.procutil import free_port
from common.tls import TLSFiles, identity_of_file, init_ca, issue
from common.transport.nats_connection import NatsConnection
from common.transport.nats_server import (
    ClusterRoutes,
    NatsServer,
    certificate_identities,
    cluster_servers,
)
from common.transport.subjects import rep_subject
from tests.rep.fakes import DEADLINE_S
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(120)

WAIT_S = 15.0
PUBLISH_EVERY_S = 0.2  # `delivered`: a message at a time until one arrives
SERVERS = ("nats", "nats-2", "nats-3")
SUBJECT = rep_subject("rep-0", "stop")  # the BBS may publish it, rep-0 may subscribe to it


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    directory = tmp_path / "pki"
    init_ca(directory)
    issue(directory, role="bbs", name="bbs")
    issue(directory, role="rep", name="rep-0", cells=["cell-0"])
    return directory


@pytest.fixture
def cluster(pki: Path, tmp_path: Path) -> Iterator[dict[str, NatsServer]]:
    places = {name: ("127.0.0.1", 0, free_port()) for name in SERVERS}
    servers = cluster_servers(places, certs_dir=pki, directory=tmp_path / "nats")
    try:
        for server in servers.values():
            server.start()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@contextlib.asynccontextmanager
async def connected(urls: str, pki: Path, name: str) -> AsyncIterator[NatsConnection]:
    connection = NatsConnection(urls, name=name, tls=TLSFiles.in_dir(pki, name))
    connection.start()
    try:
        await connection.wait_connected(WAIT_S)
        yield connection
    finally:
        await connection.close()


async def delivered(publisher: NatsConnection, received: list[bytes], what: str) -> None:
    """Publish until the subscriber has one of the messages (the routes and the subscription's interest
    take a moment to reach every server)."""
    sent: set[bytes] = set()

    async def received_else_publish() -> bool:
        if sent & set(received):
            return True
        body = f"{what} {len(sent)}".encode()  # another message at each look, until one arrives
        sent.add(body)
        await publisher.client.publish(SUBJECT, body)
        await publisher.client.flush()
        return False

    await eventually(received_else_publish, WAIT_S, what, lambda: received, interval=PUBLISH_EVERY_S)


def server_of(connection: NatsConnection, servers: dict[str, NatsServer]) -> str:
    url = connection.client.connected_url
    assert url is not None
    return next(name for name, server in servers.items() if server.port == url.port)


async def test_a_message_published_on_one_server_reaches_a_subscriber_on_another(
    cluster: dict[str, NatsServer], pki: Path,
) -> None:
    route_files = cluster["nats"].cluster.tls if cluster["nats"].cluster else None
    assert route_files is not None and identity_of_file(route_files.cert) is None, "the route cert is nobody"
    assert {i.name for i in certificate_identities(pki)} == {"bbs", "rep-0"}, (
        "servers and routes are no users"
    )
    received: list[bytes] = []
    async with connected(cluster["nats-3"].url, pki, "rep-0") as rep, \
            connected(cluster["nats"].url, pki, "bbs") as bbs:

        async def record(msg) -> None:
            received.append(msg.data)

        await rep.client.subscribe(SUBJECT, cb=record)
        await delivered(bbs, received, "from nats to nats-3")


async def test_another_certificate_of_the_ca_cannot_join_as_a_route(
    cluster: dict[str, NatsServer], pki: Path, tmp_path: Path,
) -> None:
    """A fourth server dialling nats's route listener with rep-0's certificate (the CA's, serverAuth and
    clientAuth, a valid client everywhere else) is refused: a route is no user with permissions."""
    first = cluster["nats"]
    assert first.cluster is not None
    rogue = NatsServer(
        tls=TLSFiles.in_dir(pki, "nats"),
        users=certificate_identities(pki),
        log_path=tmp_path / "rogue.log",
        config_dir=tmp_path / "rogue",
        cluster=ClusterRoutes(
            (f"127.0.0.1:{first.cluster.port}",), TLSFiles.in_dir(pki, "rep-0"), free_port()
        ),
    )
    rogue.start()
    try:
        assert first.log_path is not None
        refusal = "router connection closed: authentication failure"
        await eventually(lambda: refusal in first.log_path.read_text().lower(),
                         DEADLINE_S, "nats refusing the rogue route",
                         lambda: first.log_path.read_text()[-2000:])
        received: list[bytes] = []
        async with connected(first.url, pki, "rep-0") as rep, connected(rogue.url, pki, "bbs") as bbs:
            async def record(msg) -> None:
                received.append(msg.data)

            await rep.client.subscribe(SUBJECT, cb=record)
            await rep.client.flush()
            for n in range(20):
                await bbs.client.publish(SUBJECT, f"from the rogue {n}".encode())
            await bbs.client.flush()
            await rep.client.flush()  # a round trip on nats after the rogue's messages were sent
            assert received == [], "a message crossed a route that was refused"
    finally:
        rogue.stop()


async def test_a_client_given_every_url_carries_on_through_another_server_when_its_own_is_killed(
    cluster: dict[str, NatsServer], pki: Path,
) -> None:
    every_url = ",".join(server.url for server in cluster.values())
    received: list[bytes] = []
    async with connected(every_url, pki, "rep-0") as rep, connected(every_url, pki, "bbs") as bbs:
        async def record(msg) -> None:
            received.append(msg.data)

        await rep.client.subscribe(SUBJECT, cb=record)
        await delivered(bbs, received, "before the kill")
        gone = server_of(rep, cluster)
        cluster[gone].kill()
        await eventually(lambda: rep.reconnects == 1 and rep.connected, WAIT_S, "rep-0 reconnected",
                         lambda: rep.status())
        assert server_of(rep, cluster) != gone
        await delivered(bbs, received, "after the kill")
        assert rep.reconnects == 1, rep.status()
