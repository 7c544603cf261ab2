"""Serving the app with uvicorn, programmatically: our own socket (so `--port 0` works), HTTPS when given a
server TLS context (common.tls.server_context: the client certificate reaches the app, common/auth.py), a
ready file once requests are answered, and SIGTERM/SIGINT as a graceful shutdown that exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import ssl
from collections.abc import Callable, Generator
from pathlib import Path

import uvicorn

from common import runtime, serving
from common.auth import uvicorn_tls_options
from common.limits import RequestLimitOptions

GRACEFUL_SHUTDOWN_SECONDS = 10.0


class Server(serving.Server):
    """uvicorn's server, telling `on_ready` once it serves; signals handled without re-raising them."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_ready: Callable[[], None] | None = None,
        *,
        handle_signals: bool = True,
    ) -> None:
        super().__init__(config)
        self._on_ready = on_ready
        self._handle_signals = handle_signals
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and not self.should_exit:
            if self._on_ready is not None:
                self._on_ready()
            self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the captured signal after shutting down, so the process would die by it;
        # a graceful shutdown on SIGTERM is a normal exit here (status 0).
        if not self._handle_signals:
            yield
            return
        loop = asyncio.get_running_loop()
        handled = (signal.SIGINT, signal.SIGTERM)
        for sig in handled:
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket, *, tls: bool = False) -> str:
    host, port = sock.getsockname()[:2]
    if host in ("0.0.0.0", "::", ""):  # listening everywhere: loopback reaches it
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


def write_ready_file(path: Path, url: str) -> None:
    """One JSON line, written whole (rename) so a reader never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def config_for(app, graceful_timeout: float = GRACEFUL_SHUTDOWN_SECONDS,
               ssl_context: ssl.SSLContext | None = None,
               limits: RequestLimitOptions | None = None) -> uvicorn.Config:
    """`ssl_context`: serve HTTPS with it (built once, shared by every connection); None: plain HTTP.
    `limits`: the connections' (the auctioneer's settings; default: the defaults)."""
    return serving.Config(
        app,
        limits=limits,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(graceful_timeout) or 1,
        **uvicorn_tls_options(ssl_context),
    )


def run(
    app,
    sock: socket.socket,
    ready_file: Path | None = None,
    graceful_timeout: float = GRACEFUL_SHUTDOWN_SECONDS,
    ssl_context: ssl.SSLContext | None = None,
    limits: RequestLimitOptions | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status."""
    url = url_of(sock, tls=ssl_context is not None)
    server = Server(config_for(app, graceful_timeout, ssl_context, limits),
                    on_ready=(lambda: write_ready_file(ready_file, url)) if ready_file else None)
    runtime.tune_gc()  # a batch and 1,000 cell states per auction: rarer cycle collections
    with sock:
        runtime.run(server.serve(sockets=[sock]))
    return 0 if server.started else 1
