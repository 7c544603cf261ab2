"""A request id for every HTTP request a component answers: the caller's `X-Request-ID` when it sends a
usable one (a proxy's, or another component's), else a new one. It is bound in the logging context
(structlog contextvars, common/logging.py) while the request is answered, so every line logged for it
carries `request_id`, and it is returned in the response's `X-Request-ID` header.

Pure ASGI, the outermost layer: a refusal by the limits or the authorization carries an id too. Per request
it costs a header scan, 8 random bytes and a context variable set and reset — nothing per instance.
"""

# Not asgi-correlation-id: it keeps the id in a context variable of its own, which the log lines do not
# carry (common/logging.py renders structlog's contextvars), and it logs a warning for every request whose
# X-Request-ID it refuses, so that any caller could add a log line per request at will.

from __future__ import annotations

import os
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from structlog.contextvars import bind_contextvars, reset_contextvars

HEADER = b"x-request-id"
# What we accept from a caller: short, and nothing that could forge a log field or a header.
_USABLE = re.compile(rb"[A-Za-z0-9._:-]{1,128}")


def request_id(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == HEADER and _USABLE.fullmatch(value):
            return value.decode()
    return os.urandom(8).hex()


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        header = (HEADER, rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        tokens = bind_contextvars(request_id=rid)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            reset_contextvars(**tokens)


def add_request_id(app: Any) -> None:
    """Install on a FastAPI app, outermost: call it after every other add_middleware (add_limits too)."""
    app.add_middleware(RequestIdMiddleware)
