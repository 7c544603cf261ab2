"""The BBS in-process with `transport="nats"` against a real nats-server: auction requests go out on
vendue.auctioneer.lrps, events on vendue.events.<type>, and a rep process's stops go to
vendue.rep.<rep_id>.stop as one batch (presence stays an HTTP PUT)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import nats
import pytest

from bbs.api import create_app
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from common.models import CellPresence, CellPresences, DesiredLRPCreate, ResourcesModel, StopInstances
from common.tls import TLSFiles, client_context, init_ca, issue
from common.transport.nats_server import NatsServer, certificate_identities, issue_server_certificate
from common.transport.subjects import AUCTIONEER_LRPS, AUCTIONEER_QUEUE, EVENTS_ALL, rep_subject
from tests.support.polling import eventually

pytestmark = pytest.mark.timeout(60)
DEADLINE_S = 15.0


async def test_the_bbs_talks_nats(nats_server, tmp_path: Path) -> None:
    settings = BBSSettings(
        data_dir=tmp_path, transport="nats", nats_url=nats_server.url, presence_ttl=30, _env_file=None,
    )
    nc = await nats.connect(nats_server.url)
    auctions: list[list[dict]] = []
    events: list[tuple[str, dict]] = []
    stops: list[StopInstances] = []

    async def on_auction(msg) -> None:
        auctions.append(json.loads(msg.data))
        await msg.respond(json.dumps({"accepted": len(auctions[-1])}).encode())

    async def on_event(msg) -> None:
        events.append((msg.subject, json.loads(msg.data)))

    async def on_stop(msg) -> None:
        stops.append(StopInstances.model_validate_json(msg.data))
        await msg.respond(b'{"found": []}')

    await nc.subscribe(AUCTIONEER_LRPS, queue=AUCTIONEER_QUEUE, cb=on_auction)
    await nc.subscribe(EVENTS_ALL, cb=on_event)
    await nc.subscribe(rep_subject("rep-a", "stop"), cb=on_stop)
    await nc.flush()
    try:
        async with running_bbs(settings) as bbs:
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(bbs)), base_url="http://bbs")
            async with client:
                await bbs.outbound.nats.wait_connected(10)
                assert (await client.get("/ping")).json() == {"ok": True, "ready": True, "insecure": True}

                presence = CellPresence(
                    cell_id="cell-a",
                    zone="z1",
                    rep_url="http://127.0.0.1:1",
                    rep_id="rep-a",
                    total=ResourcesModel(memory_mb=1024, disk_mb=1024, containers=10),
                )
                beat = await client.put(
                    "/v1/cells", content=CellPresences(cells=[presence]).model_dump_json()
                )
                assert beat.status_code == 200, beat.text
                cells = (await client.get("/v1/cells")).json()["items"]
                assert [(c["cell_id"], c["rep_id"]) for c in cells] == [("cell-a", "rep-a")]

                # Desire: one auction request over NATS holding every index; events on NATS.
                created = await client.post("/v1/desired_lrps", json={"process_guid": "web", "instances": 3,
                                                                      "command": ["true"]})
                assert created.status_code == 201, created.text
                await eventually(lambda: auctions, DEADLINE_S, "an auction request on NATS", lambda: auctions)
                assert (
                    auctions[0][0]["indices"] == [0, 1, 2]
                    and auctions[0][0]["desired"]["process_guid"] == "web"
                )
                await eventually(lambda: any(s == "vendue.events.desired_lrp_created" for s, _ in events),
                                 DEADLINE_S, "desired_lrp_created on NATS", lambda: [s for s, _ in events])
                kinds = {s for s, _ in events}
                assert "vendue.events.cell_appeared" in kinds, kinds
                assert all(s == f"vendue.events.{e['type']}" for s, e in events)

                # A claim and a running report over HTTP, then scaling down: the stop goes over NATS.
                report = {"claimed": [{"process_guid": "web", "index": 2, "instance_guid": "g2"}],
                          "running": [{"process_guid": "web", "index": 2, "instance_guid": "g2"}]}
                response = await client.post("/v1/lifecycle", json={"cells": {"cell-a": report}})
                assert response.status_code == 200 and response.json()["cells"]["cell-a"]["refused"] == [], (
                    response.text
                )
                assert (await client.patch("/v1/desired_lrps/web", json={"instances": 2})).status_code == 200
                await eventually(lambda: stops, DEADLINE_S, "a stop on vendue.rep.rep-a.stop", lambda: stops)
                assert [s.model_dump() for s in stops] == [
                    {"instances": [{"cell_id": "cell-a", "process_guid": "web", "instance_guid": "g2"}]}]
    finally:
        await nc.close()


async def test_the_bbs_presents_its_certificate_to_a_tls_nats_server(tmp_path: Path) -> None:
    """With TLS files, the BBS's certificate is its NATS identity: the server (per-role users) lets it publish
    events, and a reader's connection receives them."""
    pki = tmp_path / "pki"
    init_ca(pki)
    issue_server_certificate(pki)
    issue(pki, role="bbs", name="bbs")
    issue(pki, role="reader", name="viewer")
    files = TLSFiles.in_dir(pki, "bbs")
    with NatsServer(tls=TLSFiles.in_dir(pki, "nats"), users=certificate_identities(pki),
                    log_path=tmp_path / "nats-server.log") as server:
        viewer = await nats.connect(server.url, tls=client_context(TLSFiles.in_dir(pki, "viewer")),
                                    tls_handshake_first=True, allow_reconnect=False, connect_timeout=5)
        events: list[str] = []

        async def on_event(msg) -> None:
            events.append(msg.subject)

        try:
            await viewer.subscribe(EVENTS_ALL, cb=on_event)
            await viewer.flush()
            settings = BBSSettings(
                data_dir=tmp_path,
                transport="nats",
                nats_url=server.url,
                tls_cert=files.cert,
                tls_key=files.key,
                tls_ca=files.ca,
                _env_file=None,
            )
            async with running_bbs(settings, converge=False) as bbs:
                await bbs.outbound.nats.wait_connected(10)
                await bbs.desired_lrps.desire(DesiredLRPCreate(process_guid="web", instances=1,
                                                               command=["true"]))
                await eventually(lambda: "vendue.events.desired_lrp_created" in events,
                                 DEADLINE_S, "desired_lrp_created from the BBS on the TLS server",
                                 lambda: events)
        finally:
            await viewer.close()
