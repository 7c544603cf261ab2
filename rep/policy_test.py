"""The rep's authorization table against a real `vendue rep --executor sim --cells 3` process serving HTTPS
with certificates made here (common.tls), and the fake BBS (tests/fake_bbs.py) over HTTPS (it answers the
lease and verifies bearer tokens)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from common.auth import READ_ROLES
from common.models import CellPresence, HostWorkResult
from common.tls import ROLES, TLSFiles, client_context, init_ca, issue, server_context
from rep.api import create_app
from rep.fencing import Fencing
from rep.host import RepHost
from rep.policy import POLICY
from tests.fake_bbs import FakeBBS, fake_bbs
from tests.rep import fakes
from tests.rep.fakes import DEADLINE_S, REPO, STARTUP_S, cell_details, desired, post_work, work_body
from tests.support.polling import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
start_rep = fakes.start_rep  # the fixture: real rep processes, always stopped

CELLS = ["sim0-0", "sim0-1", "sim0-2"]
CALLERS = {role: f"{role}-1" for role in ROLES}  # one certificate per role; the rep's is "rep-a"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    issue(d, role="rep", name="rep-a", cell_prefixes=["sim0-"])
    issue(d, role="bbs", name="bbs")
    for role, name in CALLERS.items():
        issue(d, role=role, name=name, **({"cells": ["elsewhere-0"]} if role == "rep" else {}))
    other = d / "other"
    init_ca(other)
    issue(other, role="auctioneer", name="auctioneer-1")
    return d


@pytest.fixture
async def bbs(pki: Path) -> AsyncIterator[FakeBBS]:
    async with fake_bbs(ssl_context=server_context(TLSFiles.in_dir(pki, "bbs"))) as fake:
        fake.hold_lease(1)  # work_body's token
        fake.tokens = {"admin-token": ("admin", "ops"), "reader-token": ("reader", "dash")}
        yield fake


def as_(pki: Path, name: str | None, token: str | None = None) -> httpx.AsyncClient:
    """A client presenting `name`'s certificate (None: none), trusting only the cluster CA."""
    verify = client_context(TLSFiles.in_dir(pki, name)) if name else client_context(None, ca=pki / "ca.pem")
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(verify=verify, headers=headers, timeout=DEADLINE_S)


def tls_flags(pki: Path, name: str = "rep-a") -> list[str]:
    files = TLSFiles.in_dir(pki, name)
    return ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca)]


def test_every_route_has_a_row(tmp_path: Path) -> None:
    host = RepHost([], [], httpx.AsyncClient(), "http://bbs.test")

    async def no_lease() -> None:
        return None

    app = create_app(host, Fencing(tmp_path / "fencing-token", no_lease), insecure=False)
    assert POLICY.missing(app.router.routes) == []
    assert {path for _, path in POLICY.rows} >= {
        "/state",
        "/work",
        "/stop",
        "/cancel",
        "/cordon",
        "/evacuate",
        "/cells",
        "/usage",
    }


async def test_every_route_refuses_callers_without_identity_or_role(
    pki: Path, bbs: FakeBBS, start_rep
) -> None:
    rep = await start_rep("--executor", "sim", "--cells", "3", "--cell-id", "sim0", "--bbs-url", bbs.url,
                          "--presence-ttl", "1", *tls_flags(pki))
    assert rep.url.startswith("https://")
    await eventually(lambda: {p.cell_id for p in bbs.heartbeats} == set(CELLS),
                     DEADLINE_S, "heartbeats of every cell",
                     lambda: [p.cell_id for p in bbs.heartbeats])
    presence: CellPresence = bbs.heartbeats[-1]
    assert (presence.rep_id, presence.rep_url, presence.insecure) == ("rep-a", rep.url, False)
    callers = {caller for caller, _ in bbs.callers}
    assert callers == {"rep 'rep-a'"}, "every BBS call presents the rep's certificate"

    async with as_(pki, None) as anonymous:
        ping = await anonymous.get(f"{rep.url}/ping")
        assert ping.status_code == 200 and ping.json() == {"ok": True, "insecure": False}
        for path in ("/livez", "/readyz"):
            assert (await anonymous.get(f"{rep.url}{path}")).status_code == 200, path
        for (method, path), row in POLICY.rows.items():
            if row.public:
                continue
            answer = await anonymous.request(method, f"{rep.url}{path}", json={})
            assert answer.status_code == 401, (method, path, answer.text)
            for role in sorted(set(ROLES) - row.roles):
                async with as_(pki, CALLERS[role]) as caller:
                    answer = await caller.request(method, f"{rep.url}{path}", json={})
                assert answer.status_code == 403, (method, path, role, answer.text)
                assert f"role {role}" in answer.json()["detail"], answer.text

    # Work is the auctioneer's: forged work with a rep's or the admin's certificate is refused, nothing taken.
    app = desired("app", memory_mb=64)
    for name in (CALLERS["rep"], "rep-a", CALLERS["admin"]):
        async with as_(pki, name) as forger:
            answer = await forger.post(f"{rep.url}/work", json=work_body("sim0-0", (app, 0)))
        assert answer.status_code == 403, (name, answer.text)
    async with as_(pki, CALLERS["auctioneer"]) as auctioneer:
        answer = await post_work(auctioneer, rep.url, work_body("sim0-0", (app, 0)))
        assert answer.status_code == 200, answer.text
        assert HostWorkResult.model_validate_json(answer.content).cells["sim0-0"].rejected_lrps == []
        details = await cell_details(auctioneer, rep.url)
    assert [d.bid.lrp_counts for d in details] == [{"app": 1}, {}, {}]
    assert not any(d.insecure for d in details)

    # The BBS stops and cancels; a person reads with a bearer token the BBS vouches for, may not place work.
    # The real BBS stores a cordon before it tells the rep, so its heartbeat answers agree with the push; the
    # fake must too, or a heartbeat between the push and the work below un-cordons the cell.
    bbs.cordoned.add("sim0-1")
    async with as_(pki, CALLERS["bbs"]) as the_bbs:
        stop = await the_bbs.post(f"{rep.url}/stop", json={"instances": [
            {"cell_id": "sim0-1", "process_guid": "app", "instance_guid": "nope"}]})
        assert stop.status_code == 202 and stop.json() == {"found": []}, stop.text
        cordon = await the_bbs.post(f"{rep.url}/cordon", json={"cells": [
            {"cell_id": "sim0-1", "cordoned": True}, {"cell_id": "elsewhere", "cordoned": True}]})
        assert cordon.status_code == 200 and cordon.json() == {"found": ["sim0-1"]}, cordon.text
    async with as_(pki, CALLERS["auctioneer"]) as auctioneer:
        answer = await post_work(auctioneer, rep.url, work_body("sim0-1", (app, 1)))
        assert HostWorkResult.model_validate_json(answer.content).cells["sim0-1"].reason == "cell is cordoned"
    async with as_(pki, None, token="reader-token") as reader:
        assert (await reader.get(f"{rep.url}/cells")).status_code == 200
        usage = await reader.get(f"{rep.url}/usage")  # the sim executor measures nothing
        assert usage.status_code == 200 and usage.json() == {"items": []}, usage.text
        metrics = await reader.get(f"{rep.url}/metrics")
        assert metrics.status_code == 200, metrics.text
        assert 'vendue_refused_requests_total{reason="forbidden"}' in metrics.text
        assert 'vendue_refused_requests_total{reason="no_identity"}' in metrics.text
        assert (await reader.post(f"{rep.url}/evacuate", json={"cells": ["sim0-2"]})).status_code == 403
    async with as_(pki, None, token="admin-token") as admin:
        assert (await admin.post(f"{rep.url}/work", json={})).status_code == 403
    async with as_(pki, None, token="forged") as nobody:
        assert (await nobody.get(f"{rep.url}/state")).status_code == 401
    assert set(POLICY.rule("GET", "/metrics").roles) == set(READ_ROLES)


async def test_a_certificate_from_another_ca_fails_the_handshake(pki: Path, bbs: FakeBBS, start_rep) -> None:
    rep = await start_rep("--executor", "sim", "--cells", "3", "--cell-id", "sim0", "--bbs-url", bbs.url,
                          *tls_flags(pki))
    other = pki / "other"
    stranger = TLSFiles(other / "auctioneer-1.pem", other / "auctioneer-1-key.pem", pki / "ca.pem")
    async with httpx.AsyncClient(verify=client_context(stranger), timeout=DEADLINE_S) as client:
        with pytest.raises(httpx.TransportError):
            await client.get(f"{rep.url}/state")
    async with as_(pki, None) as anonymous:  # the rep still serves everyone else
        assert (await anonymous.get(f"{rep.url}/ping")).status_code == 200


async def test_a_rep_refuses_to_start_insecure_off_loopback_or_for_cells_not_in_its_certificate(
    pki: Path, tmp_path: Path
) -> None:
    async def vendue_rep(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-c", "from deploy.cli import main; main()", "rep", "--port", "0",
               "--data-dir", str(tmp_path), "--executor", "sim", *args]
        return await asyncio.to_thread(subprocess.run, cmd, cwd=REPO, capture_output=True, text=True,
                                       timeout=STARTUP_S)

    plain = await vendue_rep("--listen", "0.0.0.0")
    assert plain.returncode == 2, plain.stderr
    assert plain.stderr.strip().splitlines()[-1].startswith(
        "error: --tls-cert (tls_cert): refusing to serve plain HTTP on 0.0.0.0")
    foreign = await vendue_rep("--cell-id", "sim1", "--cells", "2", *tls_flags(pki))
    assert foreign.returncode == 2, foreign.stderr
    assert foreign.stderr.strip().splitlines()[-1].startswith(
        "error: --cell-id (cell_id): the certificate"), foreign.stderr
    assert "sim1-0" in foreign.stderr
