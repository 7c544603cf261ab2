"""Authentication and authorization for every Vendue server, enforced in one place: an ASGI middleware.

Each service declares one `Policy`: a row per route (method and path template, as the app registers it)
naming the roles that may call it, or PUBLIC (`/ping`, `/livez`, `/readyz`: they need nothing and tell
nothing). The middleware, before the route runs and before any body is read:

1. finds the caller's identity: a bearer token (`Authorization: Bearer ...`, checked by the service's
   `verify_token`; tokens name the admin or reader role only) or else the client certificate the TLS
   handshake verified (common/tls.py says what it states);
2. finds the request's row: none → 403 (a route without a row is refused: deny by default; a test per
   service checks every route has one), PUBLIC → served;
3. no identity → 401; a role the row does not name → 403 naming the role and the rule.

A refusal is logged with the caller's identity, its reason is left in the scope for the refusal counter
(common/http_metrics.py, outside this middleware), and nothing behind it runs. The identity travels on
in `request.state.identity` for the checks only a handler can make (a rep reports only for the cells in
its certificate: `require_cells`).

`insecure=True` (`--insecure`) turns all of this off: every caller is an admin named "insecure".
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException, Request
from starlette.routing import Match, Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from .models import TOKEN_ROLES, TokenIdentity
from .serving import ConnectionProtocol
from .tls import Identity, identity_from_der

log = logging.getLogger("auth")

PUBLIC: frozenset[str] = frozenset({"*public*"})
INSECURE = Identity("admin", "insecure", via="insecure")
TLS_SCOPE_KEY = "vendue.client_cert_der"
# Why a request was refused, for the refusal counter (common/http_metrics.py).
REFUSAL_SCOPE_KEY = "vendue.refusal"

VerifyToken = Callable[[str], Awaitable[Identity | None]]


# --- the client certificate, carried into the ASGI scope --------------------------------------------


class PeerCertProtocol(ConnectionProtocol):
    """uvicorn's httptools protocol (with the connection limits of common/serving.py), putting the verified
    client certificate (DER, or None) of the connection into each request's scope: uvicorn itself does
    not pass TLS details on to the app."""

    _peer_der: bytes | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._refused:
            return
        ssl_object = transport.get_extra_info("ssl_object")
        self._peer_der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[TLS_SCOPE_KEY] = self._peer_der  # type: ignore[literal-required]


WEBSOCKET_LOG = logging.getLogger("uvicorn.websocket")
WEBSOCKET_LOG.setLevel(logging.WARNING)


class PeerCertWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol (the `websockets` library's, sans-I/O), which an upgraded connection
    (`vendue exec`) is handed to: the client certificate goes into its scope as into an HTTP request's, so
    the middleware authorizes the upgrade as any request."""

    _peer_der: bytes | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn logs each upgrade's path and query at info ("WebSocket /...?argv=... [accepted]"): a
        # command's arguments, which may hold secrets, would reach the log. Its warnings and errors only.
        self.logger = WEBSOCKET_LOG

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        ssl_object = transport.get_extra_info("ssl_object")
        self._peer_der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None

    async def run_asgi(self) -> None:
        self.scope[TLS_SCOPE_KEY] = self._peer_der  # type: ignore[literal-required]
        await super().run_asgi()


def uvicorn_tls_options(context: Any) -> dict[str, Any]:
    """uvicorn.Config keyword arguments that serve HTTPS with `context` (common.tls.server_context) and
    hand the client certificate on to the app, WebSocket upgrades included. None: plain HTTP."""
    if context is None:
        return {"ws": PeerCertWebSocketProtocol}
    return {"ssl_context_factory": lambda _config, _default: context, "http": PeerCertProtocol,
            "ws": PeerCertWebSocketProtocol}


# --- the table ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    roles: frozenset[str]
    why: str = ""  # said in a 403: what the rule is for

    @property
    def public(self) -> bool:
        return self.roles is PUBLIC


class Policy:
    """(METHOD, path template) -> Rule. Templates are the app's own (`/v1/leases/{name}`)."""

    def __init__(self, rows: Mapping[tuple[str, str], Rule | Iterable[str]]) -> None:
        self.rows: dict[tuple[str, str], Rule] = {
            (method.upper(), path): rule if isinstance(rule, Rule) else Rule(frozenset(rule))
            for (method, path), rule in rows.items()
        }

    def rule(self, method: str, path: str) -> Rule | None:
        rule = self.rows.get((method, path))
        if rule is None and method == "HEAD":
            rule = self.rows.get(("GET", path))
        return rule

    def missing(self, routes: Iterable[Any]) -> list[tuple[str, str]]:
        """Routes of an app without a row (a test per service asserts there are none)."""
        out = []
        for route in routes:
            if isinstance(route, Route):  # the docs pages too: a route hidden from the schema is still served
                for method in sorted(route.methods or ()):
                    if method != "HEAD" and self.rule(method, route.path) is None:
                        out.append((method, route.path))
            elif isinstance(route, WebSocketRoute) and self.rule(WEBSOCKET_METHOD, route.path) is None:
                out.append((WEBSOCKET_METHOD, route.path))
        return out


def rule(*roles: str, why: str = "") -> Rule:
    return Rule(frozenset(roles), why)


def public() -> Rule:
    return Rule(PUBLIC)


READ_ROLES = ("admin", "reader")  # every GET a person may make
# A WebSocket upgrade is a GET on the wire; its row is ("GET", path), as for any other GET.
WEBSOCKET_METHOD = "GET"


# --- the middleware -----------------------------------------------------------------------------------


class Refusal(Exception):
    def __init__(self, status: int, detail: str, reason: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.reason = reason  # the metric label: no_identity, bad_token, forbidden, no_rule


class AuthMiddleware:
    """See the module docstring. `app` is the service's FastAPI app (its routes are matched here)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        policy: Policy,
        routes: Callable[[], Iterable[Any]],
        verify_token: VerifyToken | None = None,
        insecure: bool = False,
        service: str = "",
        session_cookie: str | None = None,
    ) -> None:
        """`session_cookie`: the name of a cookie holding a bearer token (the BBS's dashboard session,
        bbs/dashboard.py), taken as one for GET and HEAD only (a browser sends cookies on any request another
        site makes it send: none that writes may be authorized by one) and only from a caller with
        neither an Authorization header nor a client certificate."""
        self.app = app
        self.session_cookie = session_cookie
        self.policy = policy
        self._routes = routes
        self.verify_token = verify_token
        self.insecure = insecure
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # lifespan: no caller
            await self.app(scope, receive, send)
            return
        try:
            identity = await self._authorize(scope)
        except Refusal as refusal:
            await self._refuse(scope, send, refusal)
            return
        scope.setdefault("state", {})["identity"] = identity
        await self.app(scope, receive, send)

    async def _authorize(self, scope: Scope) -> Identity | None:
        if self.insecure:  # everything is allowed: no route lookup on the hot paths
            return INSECURE
        method = _method(scope)
        template = route_template(self._routes(), scope)
        row = self.policy.rule(method, template) if template is not None else None
        if row is not None and row.public:
            return None
        identity = await self._identity(scope)
        if identity is None:
            raise Refusal(401, "authentication required: a client certificate from the cluster CA or a "
                               "bearer token", "no_identity")
        if template is None:  # no such route: the app answers 404 to anyone who may ask at all
            return identity
        if row is None:
            raise Refusal(403, f"{method} {template} has no row in the authorization table: refused for "
                               "everyone", "no_rule")
        if identity.role not in row.roles:
            allowed = ", ".join(sorted(row.roles)) or "nobody"
            why = f" ({row.why})" if row.why else ""
            raise Refusal(403, f"role {identity.role} ({identity.name}) may not {method} {template}: only "
                               f"{allowed}{why}", "forbidden")
        return identity

    async def _identity(self, scope: Scope) -> Identity | None:
        token = _bearer(scope)
        # Never for a WebSocket: a browser sends cookies with the upgrade another site's page asks for, and
        # no same-origin rule applies to WebSockets.
        if (token is None and self.session_cookie is not None and scope["type"] == "http"
                and scope["method"] in ("GET", "HEAD") and not scope.get(TLS_SCOPE_KEY)):
            token = _cookie(scope, self.session_cookie)
        if token is not None:
            if not token:  # another scheme (Basic ...): no token to ask anyone about
                raise Refusal(401, "the Authorization header holds no bearer token", "bad_token")
            if self.verify_token is None:
                raise Refusal(401, "bearer tokens are not accepted here", "bad_token")
            try:
                identity = await self.verify_token(token)
            except Exception as exc:  # noqa: BLE001 - the verifier (the BBS) did not say: not authenticated
                log.warning("token verification failed", extra={"data": {"error": repr(exc)}})
                raise Refusal(401, "the bearer token could not be checked (the BBS did not say whom it "
                                   "stands for)", "token_unverified") from None
            if identity is None or identity.role not in TOKEN_ROLES:  # a token never stands for a component
                raise Refusal(401, "invalid, expired or revoked bearer token", "bad_token")
            return identity
        der = scope.get(TLS_SCOPE_KEY)
        if der:
            identity = identity_from_der(der)
            if identity is None:
                raise Refusal(401, "the client certificate names no Vendue role", "bad_certificate")
            return identity
        return None

    async def _refuse(self, scope: Scope, send: Send, refusal: Refusal) -> None:
        scope[REFUSAL_SCOPE_KEY] = refusal.reason
        client = scope.get("client")
        log.warning("request refused", extra={"data": {
            "service": self.service, "status": refusal.status, "reason": refusal.reason,
            "method": _method(scope), "path": scope["path"], "caller": _caller(scope),
            "client": f"{client[0]}:{client[1]}" if client else "", "detail": refusal.detail,
        }})
        body = json.dumps({"detail": refusal.detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if refusal.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="vendue"'))
        # A refused WebSocket upgrade gets the same HTTP answer (ASGI's denial response), never a socket.
        prefix = "websocket.http" if scope["type"] == "websocket" else "http"
        await send({"type": f"{prefix}.response.start", "status": refusal.status, "headers": headers})
        await send({"type": f"{prefix}.response.body", "body": body})


def route_template(routes: Iterable[Any], scope: Scope) -> str | None:
    """The path template of the route a request will reach: the first full match (path and method),
    else the first route with the path (another method: the app answers 405); None: no route has it."""
    partial = None
    for route in routes:
        if isinstance(route, WebSocketRoute) and scope["type"] == "http":
            # A plain request to a WebSocket's path is judged by the WebSocket's row (then answered 404),
            # so that a refusal looks the same whichever way the path is asked for.
            if route.path_regex.match(scope["path"]):
                return route.path
            continue
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return getattr(route, "path", None)
        if match is Match.PARTIAL and partial is None:
            partial = getattr(route, "path", None)
    return partial


def _method(scope: Scope) -> str:
    return str(scope["method"]) if scope["type"] == "http" else WEBSOCKET_METHOD


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return ""  # present but not a bearer token: checked (and refused) as one
    return None


def _cookie(scope: Scope, name: str) -> str | None:
    """The value of cookie `name` in the request, if any (None: absent, as if no token were given)."""
    for header, value in scope.get("headers", ()):
        if header == b"cookie":
            for pair in value.decode("latin-1").split(";"):
                key, sep, found = pair.strip().partition("=")
                if sep and key == name and found:
                    return found
    return None


def _caller(scope: Scope) -> str:
    """Who the refused caller said it was, for the log (never the token itself)."""
    if _bearer(scope) is not None:
        return "bearer token"
    der = scope.get(TLS_SCOPE_KEY)
    identity = identity_from_der(der) if der else None
    return identity.describe() if identity is not None else "anonymous"


# --- checks only a handler can make -------------------------------------------------------------------


def identity_of(request: Request) -> Identity | None:
    return getattr(request.state, "identity", None)


def require_cells(request: Request, cell_ids: Iterable[str]) -> None:
    """403 unless the caller is not a rep (its row already said it may) or a rep speaking only for the
    cells its certificate names."""
    identity = identity_of(request)
    if identity is None or identity.role != "rep":
        return
    foreign = sorted({c for c in cell_ids if not identity.speaks_for(c)})
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise HTTPException(
            status_code=403,
            detail=f"rep {identity.name!r} may speak only for the cells in its certificate, not {shown}",
        )


def add_auth(app: Any, policy: Policy, **options: Any) -> None:
    """Install the middleware on a FastAPI app; call after its routes are added (they are read live)."""
    app.add_middleware(AuthMiddleware, policy=policy, routes=lambda: app.router.routes, **options)


def token_identity(role: str, name: str, token_id: str) -> Identity:
    """Whom a bearer token stands for, the same on every service: its role, and its name (a token made
    without one: its id, so a log line still says which)."""
    return Identity(role, name or f"token {token_id}", via="token")


def bbs_token_verifier(client: Any, *, cache_s: float = 1.0) -> VerifyToken:
    """For the auctioneer and the reps: ask the BBS whom a bearer token stands for (`POST /v1/tokens/verify`;
    `client`: an httpx.AsyncClient based on the BBS URL, presenting the component's own certificate). An
    answer is kept `cache_s` so a burst of requests with one token costs one check; a revoked token is
    refused everywhere within that. Only a 404 says the token is not valid: any other failure (the BBS
    unreachable, or refusing this component) raises, and the request is refused as unverified."""
    cache: dict[str, tuple[float, Identity | None]] = {}

    async def verify(token: str) -> Identity | None:
        now = time.monotonic()
        hit = cache.get(token)
        if hit is not None and hit[0] > now:
            return hit[1]
        response = await client.post("/v1/tokens/verify", json={"token": token})
        if response.status_code == 404:
            identity = None
        else:
            response.raise_for_status()
            found = TokenIdentity.model_validate_json(response.content)
            identity = token_identity(found.role, found.name, found.id)
        if len(cache) > 1024:
            cache.clear()
        cache[token] = (now + cache_s, identity)
        return identity

    return verify
