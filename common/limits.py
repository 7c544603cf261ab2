"""Request limits for every Vendue server (BBS, auctioneer, rep), enforced by one ASGI middleware, the
outermost, installed by each app factory (`add_limits`):

- **Body cap.** A body over the cap is answered 413 naming the cap, before it is read whole: a declared
  Content-Length over it is refused before the app runs; a chunked body is counted as the app reads it
  and refused at the first chunk past the cap. Nothing behind it is written. The 413 closes the
  connection, so the rest of the body is not read. The cap is `--max-body-bytes` (1 MiB) for everything
  a person or script sends, and `--max-bulk-body-bytes` (64 MiB) for the batches components exchange
  (the service names these routes): at the scale benchmark's size, 250 cells per rep process and
  250,000 instances, measured bodies are up to ~18 MB for a rep's lifecycle round, ~36 MB for the
  placement failures of an auction of 250,000 instances that all fail, ~5.4 MB for a rep's work of
  10,000 instances of distinct LRPs and ~4 MB for the BBS's start requests for 5,000 LRPs.
  The rest of a refused body is discarded by the HTTP server as it arrives (as for any request refused
  unread, a 401 too), so a client that sends its whole body before reading still reads the 413. Only a
  body declared over DISCARD_LIMIT_BYTES is cut off: that 413 closes the connection.
- **Streamed bodies.** Routes the service names as streamed (the BBS's blob uploads: method and path
  prefix) have no body cap here: the route bounds its own body, as it reads it, and answers 413 itself.
  Their timeout counts from the last part of the body received rather than from the start, so a large
  upload that keeps arriving is not cut off, and one that stalls is.
- **Timeout.** A request whose answer has not begun after `--request-timeout` seconds (60, the Kubernetes
  API server's default) is cancelled and answered 504. An answer that began (an event stream) is not
  timed: `--max-event-subscribers` bounds streams instead.
- **Concurrency.** At most `--max-concurrent-requests` (1,024) requests are being answered at once; one
  more is answered 503 with Retry-After at once, rather than queued. A request counts until its answer
  begins. The probes (/ping, /livez, /readyz) are neither counted nor timed: a load balancer must see an
  overloaded server alive.

The connections themselves are bounded by the HTTP server (common/serving.py): `--tls-handshake-timeout`,
`--header-timeout` and `--max-connections`, settings here beside the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("limits")

MIB = 1024 * 1024
DEFAULT_MAX_BODY_BYTES = 1 * MIB
DEFAULT_MAX_BULK_BODY_BYTES = 64 * MIB
DEFAULT_REQUEST_TIMEOUT_S = 60.0
DEFAULT_MAX_CONCURRENT_REQUESTS = 1_024
RETRY_AFTER_S = 1
DISCARD_LIMIT_BYTES = 64 * MIB
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_TLS_HANDSHAKE_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 2_000
PROBES = frozenset({"/ping", "/livez", "/readyz"})

Route = tuple[str, str]  # (METHOD, path): bulk routes have no path parameters, so the path is exact
RoutePrefix = tuple[str, str]  # (METHOD, path prefix): streamed routes


class RequestLimitOptions(BaseModel):
    """The limits as settings (a mixin of each service's settings): `--max-body-bytes`,
    `--max-bulk-body-bytes`, `--request-timeout`, `--max-concurrent-requests` (VENDUE_MAX_BODY_BYTES, ...),
    and the connections' (enforced by common/serving.py)."""

    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1)
    max_bulk_body_bytes: int = Field(default=DEFAULT_MAX_BULK_BODY_BYTES, ge=1)
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT_S, gt=0)
    max_concurrent_requests: int = Field(default=DEFAULT_MAX_CONCURRENT_REQUESTS, ge=1)
    header_timeout: float = Field(
        default=DEFAULT_HEADER_TIMEOUT_S, gt=0,
        description="Seconds a connection has to send a whole request head (line and headers); "
                    "then it is closed.",
    )
    tls_handshake_timeout: float = Field(
        default=DEFAULT_TLS_HANDSHAKE_TIMEOUT_S, gt=0,
        description="Seconds a new connection has to complete the TLS handshake; then it is closed.",
    )
    max_connections: int = Field(
        default=DEFAULT_MAX_CONNECTIONS, ge=1,
        description="Open connections at most (capped at half the open-file limit); more are closed at once.",
    )


class BodyTooLarge(HTTPException):
    """Raised by the counting `receive` inside the app: the app's exception handling answers it like any
    HTTPException (413 and the detail), and the middleware does if it reaches that far."""

    def __init__(self, cap: int, setting: str) -> None:
        super().__init__(413, too_large(cap, setting))


class LimitsMiddleware:
    def __init__(self, app: ASGIApp, *, options: RequestLimitOptions, bulk: Iterable[Route] = (),
                 streamed: Iterable[RoutePrefix] = ()) -> None:
        self.app = app
        self.options = options
        self.bulk = frozenset((method.upper(), path) for method, path in bulk)
        self.streamed = tuple((method.upper(), prefix) for method, prefix in streamed)
        self.in_flight = 0  # requests being answered (their answer not begun)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PROBES:
            await self.app(scope, receive, send)
            return
        options = self.options
        if self.in_flight >= options.max_concurrent_requests:
            await _answer(
                send,
                503,
                f"too many requests at once (at most {options.max_concurrent_requests}); "
                f"retry after {RETRY_AFTER_S} s",
                [(b"retry-after", str(RETRY_AFTER_S).encode())],
            )
            return
        bulk = (scope["method"], scope["path"]) in self.bulk
        streamed = any(scope["method"] == method and scope["path"].startswith(prefix)
                       for method, prefix in self.streamed)
        cap = options.max_bulk_body_bytes if bulk else options.max_body_bytes
        setting = "max-bulk-body-bytes" if bulk else "max-body-bytes"
        declared = _content_length(scope)
        if declared is not None and declared > cap and not streamed:
            close = [(b"connection", b"close")] if declared > DISCARD_LIMIT_BYTES else []
            await _answer(send, 413, too_large(cap, setting), close)
            return

        self.in_flight += 1
        counted = True
        received = 0
        started = False

        def release() -> None:
            nonlocal counted
            if counted:
                counted = False
                self.in_flight -= 1

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if streamed:
                    if not started:  # the body keeps arriving: time from its latest part
                        deadline.reschedule(asyncio.get_running_loop().time() + options.request_timeout)
                elif received > cap:
                    raise BodyTooLarge(cap, setting)
            return message

        async def watching_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start" and not started:
                started = True
                deadline.reschedule(None)  # an answer under way (a stream) is not timed
                release()
            await send(message)

        try:
            async with asyncio.timeout(options.request_timeout) as deadline:
                await self.app(scope, counting_receive, watching_send)
        except TimeoutError:
            if not deadline.expired() or started:
                raise  # the app's own timeout, or one after the answer began: not ours to answer
            log.warning("request timed out", extra={"data": {
                "method": scope["method"], "path": scope["path"], "timeout_s": options.request_timeout}})
            await _answer(send, 504, f"no answer within {options.request_timeout} s (request timeout)")
        except BodyTooLarge:
            if started:
                raise
            await _answer(send, 413, too_large(cap, setting))
        finally:
            release()


def add_limits(app: Any, options: RequestLimitOptions, *, bulk: Iterable[Route] = (),
               streamed: Iterable[RoutePrefix] = ()) -> None:
    """Install the limits on a FastAPI app, outside every other middleware but the request metrics and the
    request id: call it after every other add_middleware, then add_http_metrics and add_request_id.
    `streamed`: (method, path prefix) of routes that bound their own bodies (see the module doc)."""
    app.add_middleware(LimitsMiddleware, options=options, bulk=bulk, streamed=streamed)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP server refuses it before us
    return None


def too_large(cap: int, setting: str) -> str:
    return f"request body larger than {cap} bytes (--{setting})"


async def _answer(
    send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
