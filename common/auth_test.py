"""The middleware against a real uvicorn serving HTTPS on loopback, with certificates from common/tls.py."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request, WebSocket
from starlette.types import ASGIApp, Receive, Scope, Send

from common.auth import (
    REFUSAL_SCOPE_KEY,
    TLS_SCOPE_KEY,
    PeerCertProtocol,
    Policy,
    add_auth,
    public,
    require_cells,
    rule,
    uvicorn_tls_options,
)
from common.tls import Identity, TLSFiles, client_context, identity_from_der, init_ca, issue, server_context
from tests.support.polling import eventually

TOKENS = {"good-admin": Identity("admin", "ops", via="token"), "rep-token": Identity("rep", "x", via="token")}
ASKED: list[str] = []  # every token the app's verifier was asked about


def make_app(refused: list[str]) -> FastAPI:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict:
        return {"ok": True}

    @app.get("/things")
    async def things(request: Request) -> dict:
        return {"who": request.state.identity.name}

    @app.post("/things")
    async def write(request: Request) -> dict:
        return {"wrote": True}

    @app.post("/cells/report")
    async def report(request: Request, cell: str) -> dict:
        require_cells(request, [cell])
        return {"ok": True}

    @app.delete("/unlisted")
    async def unlisted() -> dict:
        return {}

    async def verify(token: str) -> Identity | None:
        ASKED.append(token)
        return TOKENS.get(token)

    policy = Policy({
        ("GET", "/ping"): public(),
        ("GET", "/things"): rule("admin", "reader"),
        ("POST", "/things"): rule("admin"),
        ("POST", "/cells/report"): rule("rep"),
    })
    add_auth(app, policy, verify_token=verify, session_cookie="session")
    app.add_middleware(RecordRefusals, refused=refused)
    return app


class RecordRefusals:
    """Outside the authorization, as common/http_metrics.py is: the reason each refusal left in the scope."""

    def __init__(self, app: ASGIApp, refused: list[str]) -> None:
        self.app = app
        self.refused = refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
        if REFUSAL_SCOPE_KEY in scope:
            self.refused.append(scope[REFUSAL_SCOPE_KEY])


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    issue(d, role="admin", name="admin")
    issue(d, role="reader", name="viewer")
    issue(d, role="rep", name="rep-1", cells=["cell-1"], cell_prefixes=["sim0-"])
    issue(d, role="bbs", name="bbs")
    other = d / "other"
    init_ca(other)
    issue(other, role="admin", name="admin")
    return d


@contextlib.asynccontextmanager
async def serving(
    pki: Path, refused: list[str], app: ASGIApp | None = None, servers: list[uvicorn.Server] | None = None
) -> AsyncIterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app or make_app(refused), log_config=None, lifespan="off",
                            **uvicorn_tls_options(server_context(TLSFiles.in_dir(pki, "bbs"))))
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    if servers is not None:
        servers.append(server)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or task.done(), 10.0, "uvicorn started", lambda: task)
        assert server.started, f"expected uvicorn to start; it ended: {task}"
        yield f"https://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


def client(pki: Path, name: str | None, url: str, token: str | None = None) -> httpx.AsyncClient:
    files = TLSFiles.in_dir(pki, name) if name else None
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, verify=client_context(files, ca=pki / "ca.pem"), headers=headers)


async def status(
    pki: Path, url: str, name: str | None, method: str, path: str, token: str | None = None
) -> int:
    async with client(pki, name, url, token) as c:
        return (await c.request(method, path)).status_code


async def test_roles_tokens_and_refusals(pki: Path) -> None:
    refused: list[str] = []
    async with serving(pki, refused) as url:
        assert await status(pki, url, None, "GET", "/ping") == 200  # public: nothing needed
        assert await status(pki, url, None, "GET", "/things") == 401  # no certificate, no token
        assert await status(pki, url, "viewer", "GET", "/things") == 200
        assert await status(pki, url, "viewer", "POST", "/things") == 403
        assert await status(pki, url, "admin", "POST", "/things") == 200
        assert await status(pki, url, "admin", "DELETE", "/unlisted") == 403  # no row: refused for everyone
        assert await status(pki, url, None, "GET", "/things", token="good-admin") == 200
        assert await status(pki, url, None, "GET", "/things", token="wrong") == 401
        assert await status(pki, url, None, "GET", "/things", token="rep-token") == 401  # tokens never a rep
        assert await status(pki, url, "rep-1", "POST", "/cells/report?cell=cell-1") == 200
        assert await status(pki, url, "rep-1", "POST", "/cells/report?cell=sim0-7") == 200
        assert await status(pki, url, "rep-1", "POST", "/cells/report?cell=cell-2") == 403
        assert await status(pki, url, "admin", "POST", "/cells/report?cell=cell-1") == 403
    assert refused.count("no_identity") == 1 and refused.count("forbidden") == 2
    assert refused.count("bad_token") == 2 and refused.count("no_rule") == 1


async def test_the_app_sees_the_peer_certificate_through_uvicorns_private_protocol(pki: Path) -> None:
    """PeerCertProtocol subclasses uvicorn's private HttpToolsProtocol and common/serving.py reads its
    connection state: pyproject.toml bounds uvicorn to the releases this passes on."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    assert issubclass(PeerCertProtocol, HttpToolsProtocol)
    for hook in ("connection_made", "on_message_begin"):  # the two methods PeerCertProtocol extends
        assert callable(vars(HttpToolsProtocol).get(hook)), hook
    seen: list[Identity | None] = []
    servers: list[uvicorn.Server] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        der = scope[TLS_SCOPE_KEY]  # set by PeerCertProtocol.on_message_begin on every request
        seen.append(identity_from_der(der) if der is not None else None)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async with serving(pki, [], app, servers) as url:
        async with client(pki, "viewer", url) as c:
            assert (await c.get("/")).text == "ok"
            # What common/serving.py's drop_idle_connections reads of each (now idle) connection.
            (connection,) = servers[0].server_state.connections
            assert isinstance(connection, PeerCertProtocol)
            assert connection.transport is not None and connection.cycle.response_complete
        async with client(pki, None, url) as c:
            assert (await c.get("/")).text == "ok"
    assert seen == [Identity("reader", "viewer"), None]


async def test_a_certificate_from_another_ca_fails_the_handshake(pki: Path) -> None:
    async with serving(pki, []) as url:
        foreign = client_context(ca=pki / "ca.pem")  # trusts the server; presents another CA's admin
        foreign.load_cert_chain(pki / "other" / "admin.pem", pki / "other" / "admin-key.pem")
        async with httpx.AsyncClient(base_url=url, verify=foreign) as c:
            with pytest.raises((httpx.ConnectError, httpx.ReadError, ssl.SSLError)):
                await c.get("/things")


async def test_an_authorization_header_of_another_scheme_is_refused_without_asking_the_verifier(
    pki: Path,
) -> None:
    refused: list[str] = []
    ASKED.clear()
    async with serving(pki, refused) as url, client(pki, None, url) as c:
        for header in ("Basic YWRtaW46cHc=", "Bearer", "good-admin"):
            response = await c.get("/things", headers={"authorization": header})
            assert response.status_code == 401, f"{header!r}: {response.status_code} {response.text}"
            assert "no bearer token" in response.json()["detail"], response.text
    assert ASKED == [] and refused == ["bad_token"] * 3


async def test_a_session_cookie_is_a_bearer_token_for_reads_only(pki: Path) -> None:
    refused: list[str] = []
    async with serving(pki, refused) as url:
        async with client(pki, None, url) as c:
            c.cookies.set("session", "good-admin")
            assert (await c.get("/things")).json() == {"who": "ops"}
            write = await c.post(
                "/things"
            )  # a cookie a browser sends along with a cross-site form: no identity
            assert write.status_code == 401, write.text
            c.cookies.set("session", "wrong")
            assert (await c.get("/things")).status_code == 401
        async with client(pki, "viewer", url) as c:  # a certificate says who the caller is, not a cookie
            c.cookies.set("session", "good-admin")
            assert (await c.get("/things")).json() == {"who": "viewer"}
    assert refused == ["no_identity", "bad_token"]


def test_policy_lists_routes_without_a_row() -> None:
    app = make_app([])
    policy = Policy({("GET", "/ping"): public()})
    missing = policy.missing(app.router.routes)
    assert ("POST", "/things") in missing and ("GET", "/ping") not in missing


def ws_app(refused: list[str]) -> FastAPI:
    app = FastAPI()

    @app.websocket("/shell")
    async def shell(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(websocket.state.identity.name)
        await websocket.close()

    async def verify(token: str) -> Identity | None:
        return TOKENS.get(token)

    add_auth(app, Policy({("GET", "/shell"): rule("admin")}), verify_token=verify, session_cookie="session")
    app.add_middleware(RecordRefusals, refused=refused)
    return app


async def upgrade(pki: Path, url: str, name: str | None, headers: dict[str, str] | None = None) -> object:
    """What a WebSocket upgrade to /shell gets: the first message, or the HTTP status it was refused with."""
    import aiohttp

    files = TLSFiles.in_dir(pki, name) if name else None
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url.replace("https", "wss") + "/shell", headers=headers,
                                          ssl=client_context(files, ca=pki / "ca.pem")) as ws:
                return (await ws.receive()).data
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


async def test_a_websocket_upgrade_is_authorized_as_any_request(pki: Path) -> None:
    """PeerCertWebSocketProtocol carries the client certificate into the upgraded connection's scope, and
    the middleware refuses an upgrade without identity or role before the route runs (with an HTTP answer);
    the dashboard's cookie never stands for a token on an upgrade. A plain GET of the path is judged by the
    WebSocket's row too."""
    refused: list[str] = []
    async with serving(pki, refused, ws_app(refused)) as url:
        assert await upgrade(pki, url, "admin") == "admin"
        assert await upgrade(pki, url, None, {"authorization": "Bearer good-admin"}) == "ops"
        assert await upgrade(pki, url, None) == 401
        assert await upgrade(pki, url, "viewer") == 403
        assert await upgrade(pki, url, None, {"cookie": "session=good-admin"}) == 401
        assert await status(pki, url, "viewer", "GET", "/shell") == 403
        assert await status(pki, url, "admin", "GET", "/shell") == 404  # no such HTTP route
    assert refused.count("no_identity") == 2 and refused.count("forbidden") == 2
