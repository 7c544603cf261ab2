"""The auctioneer's authorization table (policy.py, docs/security.md): every route has a row, and a real
`vendue auctioneer` serving HTTPS refuses callers without an identity (401) and roles outside a row (403),
against a fake BBS over HTTPS that sees the auctioneer's own certificate. A standby forwards to the leader
with its certificate; plain HTTP is only for loopback or --insecure."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from auctioneer.app import AuctioneerService, create_app
from auctioneer.policy import POLICY
from auctioneer.settings import AuctioneerSettings
from common.procutil import free_port
from common.tls import INSECURE_WARNING, TLSFiles, client_context, init_ca, issue, server_context
from deploy.cli import _register
from deploy.cli import app as cli
from tests.auctioneer.fakes import WAIT_S, desired, serving, start_request
from tests.fake_bbs import FakeBBS, fake_bbs
from tests.support.auctioneer_process import auctioneer_process
from tests.support.polling import eventually, expect

pytestmark = pytest.mark.timeout(120)

PROTECTED = [("POST", "/v1/lrps"), ("POST", "/v1/tasks"), ("GET", "/v1/stats"), ("GET", "/metrics")]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    for role, name in [("auctioneer", "auctioneer"), ("auctioneer", "auctioneer-2"), ("bbs", "bbs"),
                       ("admin", "admin"), ("reader", "viewer")]:
        issue(d, role=role, name=name)
    issue(d, role="rep", name="cell-1", cells=["cell-1"])
    init_ca(d / "other")
    issue(d / "other", role="admin", name="admin")
    return d


def as_(pki: Path, url: str, name: str | None, token: str | None = None) -> httpx.AsyncClient:
    """A client of the auctioneer at `url` with the certificate `name` (None: none) and/or a bearer token."""
    files = TLSFiles.in_dir(pki, name) if name else None
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, verify=client_context(files, ca=pki / "ca.pem"), headers=headers,
                             timeout=10, trust_env=False)


async def call(pki: Path, url: str, name: str | None, method: str, path: str, token: str | None = None,
               body: list | None = None) -> httpx.Response:
    """One request on a new connection (a POST sends `body`, or an empty list: queues nothing)."""
    async with as_(pki, url, name, token) as client:
        return await client.request(method, path, json=(body or []) if method == "POST" else None)


def tls_args(pki: Path, name: str) -> list[str]:
    files = TLSFiles.in_dir(pki, name)
    return ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca)]


@contextlib.asynccontextmanager
async def bbs_over_https(pki: Path) -> AsyncIterator[FakeBBS]:
    async with fake_bbs(ssl_context=server_context(TLSFiles.in_dir(pki, "bbs"))) as bbs:
        yield bbs


def test_every_route_has_a_row_and_every_row_a_route() -> None:
    app = create_app(AuctioneerSettings(_env_file=None))
    assert POLICY.missing(app.router.routes) == []
    routes = {(method, route.path) for route in app.router.routes for method in getattr(route, "methods", ())}
    assert set(POLICY.rows) - routes == set(), "rows for routes the app does not have"


async def test_a_real_auctioneer_serves_https_and_enforces_its_table(tmp_path: Path, pki: Path) -> None:
    async with bbs_over_https(pki) as bbs:
        bbs.tokens["ops-secret"] = ("admin", "ops")
        async with auctioneer_process(tmp_path, "--bbs-url", bbs.url, *tls_args(pki, "auctioneer")) as (
            url,
            _,
        ):
            assert url.startswith("https://127.0.0.1:"), url
            async with as_(pki, url, None) as anonymous:
                assert (await anonymous.get("/ping")).json() == {"ok": True, "insecure": False}
                assert (await anonymous.get("/livez")).status_code == 200

                async def ready() -> bool:
                    answer = await anonymous.get("/readyz")
                    return expect(answer.status_code == 200, answer.text)

                await eventually(ready, 20.0, "/readyz 200 with the lease", interval=0.05)

            for method, path in PROTECTED:
                response = await call(pki, url, None, method, path)
                assert response.status_code == 401, (method, path, response.text)

            for name, method, path in [("cell-1", "POST", "/v1/lrps"), ("admin", "POST", "/v1/lrps"),
                                       ("viewer", "POST", "/v1/tasks"), ("cell-1", "GET", "/v1/stats"),
                                       ("bbs", "GET", "/metrics"), ("auctioneer-2", "GET", "/v1/stats")]:
                response = await call(pki, url, name, method, path)
                assert response.status_code == 403, (name, method, path, response.text)
            refused = await call(pki, url, "cell-1", "POST", "/v1/lrps")
            assert refused.json()["detail"].startswith(
                "role rep (cell-1) may not POST /v1/lrps: only auctioneer, bbs"
            )

            for name, method, path, status in [
                ("bbs", "POST", "/v1/lrps", 202),
                ("auctioneer-2", "POST", "/v1/tasks", 202),
                ("viewer", "GET", "/v1/stats", 200),
                ("admin", "GET", "/metrics", 200),
            ]:
                response = await call(pki, url, name, method, path)
                assert response.status_code == status, (name, method, path, response.text)

            # Bearer tokens, checked by the BBS: for people, never a component's role.
            assert (await call(pki, url, None, "GET", "/v1/stats", token="ops-secret")).status_code == 200
            assert (await call(pki, url, None, "POST", "/v1/lrps", token="ops-secret")).status_code == 403
            assert (await call(pki, url, None, "GET", "/v1/stats", token="forged")).status_code == 401

            # (TLS 1.3: the server checks the client's certificate after the client's side of the handshake,
            # so the client may only see the connection dropped.)
            with pytest.raises(
                (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, ssl.SSLError)
            ):
                async with httpx.AsyncClient(
                    base_url=url,
                    trust_env=False,
                    verify=client_context(
                        TLSFiles(pki / "other" / "admin.pem", pki / "other" / "admin-key.pem", pki / "ca.pem")
                    ),
                ) as c:
                    await c.get("/v1/stats")  # a certificate the cluster CA did not sign: no handshake

            metrics = (await call(pki, url, "admin", "GET", "/metrics")).text
            assert 'vendue_refused_requests_total{reason="forbidden"} 8.0' in metrics, metrics
            assert 'vendue_refused_requests_total{reason="no_identity"} 4.0' in metrics
            stats = (await call(pki, url, "viewer", "GET", "/v1/stats")).json()
            assert stats["leader"] and stats["fencing_token"] == 1 and stats["rep_connections_opened"] == 0

    # The BBS saw the auctioneer's certificate on every call: the lease, the token checks.
    callers = {caller for caller, _ in bbs.callers}
    assert callers == {"auctioneer 'auctioneer'"}, bbs.callers
    assert ("auctioneer 'auctioneer'", "POST /v1/tokens/verify") in bbs.callers, bbs.callers


@contextlib.asynccontextmanager
async def auctioneer_in_process(pki: Path, name: str, bbs: FakeBBS) -> AsyncIterator[AuctioneerService]:
    """An auctioneer serving HTTPS with the certificate `name`, in this event loop."""
    files, port = TLSFiles.in_dir(pki, name), free_port()  # the port up front: it is the advertised URL
    app = create_app(AuctioneerSettings(_env_file=None, bbs_url=bbs.url, port=port, lease_ttl=60,
                                        tls_cert=files.cert, tls_key=files.key, tls_ca=files.ca))
    async with serving(app, server_context(files), port=port):
        yield app.state.service


async def test_a_standby_forwards_to_the_leader_with_its_certificate(pki: Path) -> None:
    async with bbs_over_https(pki) as bbs, auctioneer_in_process(pki, "auctioneer", bbs) as leader:
        await eventually(lambda: leader.leadership.leader, WAIT_S, "a leader", lambda: f"lease {bbs.lease}")
        async with auctioneer_in_process(pki, "auctioneer-2", bbs) as standby:
            assert leader.leadership.url.startswith("https://127.0.0.1:")
            await eventually(
                lambda: standby.leadership.holder_url == leader.leadership.url,
                WAIT_S, "the standby knowing the leader", lambda: standby.leadership.holder_url,
            )
            standby_url = standby.leadership.url
            web = start_request(desired("web", 2)).model_dump(mode="json")
            response = await call(pki, standby_url, "bbs", "POST", "/v1/lrps", body=[web])
            assert response.status_code == 202 and response.json() == {"accepted": 1}, response.text
            assert (standby.forwarder.forwarded, standby.forwarder.forward_failures) == (1, 0)
            # The leader auctions it (no cells: both instances fail) and reports under its term.
            await eventually(lambda: bbs.failure_reports, WAIT_S, "a failure report",
                             lambda: f"{bbs.failure_posts} posts")
            report = bbs.failure_reports[0]
            assert ([f.process_guid for f in report.lrps], report.fencing_token) == (["web", "web"], 1)
            assert (leader.metrics.auctions, standby.metrics.auctions, standby.batcher.pending) == (1, 0, 0)
    assert {caller for caller, _ in bbs.callers} == {"auctioneer 'auctioneer'", "auctioneer 'auctioneer-2'"}


def test_plain_http_on_another_address_is_refused_in_one_line() -> None:
    _register()
    unset = dict.fromkeys(("VENDUE_INSECURE", "VENDUE_TLS_CERT", "VENDUE_TLS_KEY", "VENDUE_TLS_CA"))
    result = CliRunner().invoke(cli, ["auctioneer", "--listen", "0.0.0.0", "--port", "0"], env=unset)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(
        "error: --tls-cert (tls_cert): refusing to serve plain HTTP on 0.0.0.0"), result.output
    assert result.output.count("\n") == 1


async def test_insecure_says_so_and_lets_anyone_in(tmp_path: Path) -> None:
    async with fake_bbs() as bbs:
        async with auctioneer_process(tmp_path, "--bbs-url", bbs.url, "--insecure") as (url, _), \
                httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as anyone:
            assert url.startswith("http://")
            assert (await anyone.get("/ping")).json() == {"ok": True, "insecure": True}
            assert (await anyone.get("/v1/stats")).status_code == 200  # no certificate, no token
        log = (tmp_path / "auctioneer.log").read_text()
        assert INSECURE_WARNING in log, log
