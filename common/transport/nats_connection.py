"""One nats-py connection per process: connect with retry and backoff, then reconnect forever.

nats-py's own initial connect either gives up or loops silently; here the first connection is retried
with a growing delay and a clear log line ("NATS unreachable ..."), so a component started before its
NATS server waits for it instead of crash-looping. Once connected, nats-py reconnects by itself for
ever (subscriptions are restored, publishes made while disconnected are buffered and flushed), to any
server of the list (`nats://a:4222,nats://b:4222`: a NATS cluster) or that the servers announced; a
server that went silent is noticed by its unanswered pings (PING_INTERVAL_S), and its connection is
aborted, not closed politely (`_LeavingClient`).

`connected` is what /ping reports as readiness. Callbacks registered with `on_connect` run once, after
the first successful connection (subscriptions made then survive later reconnects).

Auth: credentials in the URL (nats://user:pass@host:port or nats://token@host:port) are used by nats-py
directly; a token may also come from VENDUE_NATS_TOKEN (the `token` argument). Log lines never show them.

TLS: `NatsConnection(url, name=..., tls=TLSFiles(...))` (the component's --tls-cert/--tls-key/--tls-ca)
trusts only the cluster CA and presents the component's certificate, which is its NATS user (its
permissions: docs/security.md, common/transport/nats_server.py). The URL may say `tls://host:port` or
`nats://host:port`: either way the client starts TLS before reading a byte from the server
(tls_handshake_first), so neither a server nor anyone in between can keep it in plaintext (nats-py
would otherwise follow the server's INFO line, which anyone on the path can forge). The server must
accept a TLS-first handshake: ours does (`handshake_first`); an external nats-server needs
`tls { handshake_first: auto }` (2.10.4 or later). Every reconnect does the same.

A message the server refused (`Permissions Violation`: a subject this identity may not publish to or
subscribe to) is not an error of the connection: it is counted (`permission_violations` in `status()`)
and logged as a warning, at most once every UNREACHABLE_LOG_EVERY_S, since the sender may loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.protocol.parser import PERMISSIONS_ERR  # how nats-py words the server's -ERR

from common.retry import NATS_CONNECT
from common.tls import TLSFiles, client_context

log = logging.getLogger("common.nats")

OnConnect = Callable[[Client], Coroutine[Any, Any, None]]

# A server gone silent (cut off: its packets vanish, so TCP reports nothing) is given up after
# MAX_OUTSTANDING_PINGS + 1 pings without a PONG, within ~3 * PING_INTERVAL_S, and the client moves to
# another server of the cluster (every URL of --nats-url). nats-py's default, a ping every two minutes,
# would leave a rep unreachable (every auction waiting its state timeout for it) for up to six.
PING_INTERVAL_S = 2
MAX_OUTSTANDING_PINGS = 2
MAX_BACKOFF_S = NATS_CONNECT.max_s  # common/retry.py's policy; a connection may cap it lower
# nats-py's limit on reconnect attempts, per server, for no limit. Its default (60) gives a client up for
# good half a minute into an outage at our reconnect wait: a NATS server that `vendue up` restarts with
# backoff, or one down for maintenance, would leave every component deaf until restarted.
RECONNECT_FOREVER = -1
# While unreachable at start, say so on the first failure and then every this many seconds.
UNREACHABLE_LOG_EVERY_S = 30.0


def redact(url: str) -> str:
    """The URL without user, password or token (for log lines and errors)."""
    parts = [p.strip() for p in url.split(",") if p.strip()]
    out = []
    for part in parts:
        split = urlsplit(part if "://" in part else "nats://" + part)
        if split.username is not None or split.password is not None:
            host = split.hostname or ""
            netloc = f"***@{host}" + (f":{split.port}" if split.port else "")
            out.append(urlunsplit(split._replace(netloc=netloc)))
        else:
            out.append(part)
    return ",".join(out)


def server_list(url: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` -> both servers (a NATS cluster)."""
    return [p.strip() for p in url.split(",") if p.strip()]


class NatsConnection:
    def __init__(
        self,
        url: str,
        *,
        name: str,
        token: str | None = None,
        connect_timeout: float = 2.0,
        reconnect_wait: float = 0.5,
        max_backoff: float = MAX_BACKOFF_S,
        tls: TLSFiles | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self._token = token or None
        # Built once (CertError, naming tls_cert, if the files do not load): every reconnect reuses it.
        self._tls = client_context(tls) if tls is not None else None
        self._connect_timeout = connect_timeout
        self._reconnect_wait = reconnect_wait
        self._max_backoff = max_backoff
        self._nc: Client | None = None
        self._on_connect: list[OnConnect] = []
        self._connecting: asyncio.Task[None] | None = None
        self._first = asyncio.Event()
        self._up = asyncio.Event()  # set while connected (the first time and after every reconnect)
        self._closed = False
        self.failed_attempts = 0
        self.reconnects = 0
        self.disconnects = 0
        self.reconnect_failures = 0  # attempts to reconnect that failed, over every outage
        self.permission_violations = 0
        self._violation_logged_at: float | None = None

    # --- state ----------------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def client(self) -> Client:
        """The nats-py client; only once connected at least once (see `wait_connected`)."""
        if self._nc is None:
            raise RuntimeError(f"not connected to NATS at {redact(self.url)} yet")
        return self._nc

    def status(self) -> dict[str, object]:
        """For /ping and /v1/stats: whether NATS is reachable now, and how it went."""
        return {
            "connected": self.connected, "url": redact(self.url), "tls": self._tls is not None,
            "reconnects": self.reconnects, "disconnects": self.disconnects,
            "failed_attempts": self.failed_attempts, "reconnect_failures": self.reconnect_failures,
            "permission_violations": self.permission_violations,
        }

    async def until_connected(self, timeout: float) -> bool:
        """Wait up to `timeout` for the connection to be up (e.g. a NATS restart); True if it is."""
        if self.connected:
            return True
        try:
            await asyncio.wait_for(self._up.wait(), max(0.0, timeout))
        except TimeoutError:
            return False
        return self.connected

    def on_connect(self, callback: OnConnect) -> None:
        """Run `callback(client)` once after the first connection (at once if already connected)."""
        self._on_connect.append(callback)
        if self._nc is not None and self._first.is_set():
            asyncio.get_running_loop().create_task(callback(self._nc))

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Begin connecting in the background; returns at once."""
        if self._connecting is None:
            self._connecting = asyncio.create_task(self._connect_until_done(),
                                                   name=f"nats-connect-{self.name}")

    async def wait_connected(self, timeout: float) -> None:
        """Wait (bounded) for the first connection; raises TimeoutError naming the server."""
        try:
            await asyncio.wait_for(self._first.wait(), timeout)
        except TimeoutError:
            raise TimeoutError(
                f"expected a NATS connection to {redact(self.url)} within {timeout:g} s; "
                f"{self.failed_attempts} attempts failed"
            ) from None

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
        if self._nc is not None and not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.drain(), 2.0)
            with contextlib.suppress(Exception):
                await self._nc.close()

    async def _connect_until_done(self) -> None:
        delays = NATS_CONNECT.capped(self._max_backoff).delays()
        loop = asyncio.get_running_loop()
        last_logged = -UNREACHABLE_LOG_EVERY_S
        while not self._closed:
            try:
                nc = await self._connect_once()
            except Exception as exc:  # every failure is the same to us: wait and try again
                self.failed_attempts += 1
                delay = next(delays)
                now = loop.time()
                if now - last_logged >= UNREACHABLE_LOG_EVERY_S:
                    last_logged = now
                    log.warning("NATS unreachable; retrying with backoff", extra={"data": {
                        "url": redact(self.url), "error": _describe(exc), "attempts": self.failed_attempts,
                        "retry_in_s": delay,
                    }})
                await asyncio.sleep(delay)  # backoff between connection attempts
                continue
            # Connected: from now on nats-py reconnects by itself, for ever (it reads both when a link drops).
            nc.options["allow_reconnect"] = True
            nc.options["max_reconnect_attempts"] = RECONNECT_FOREVER
            self._nc = nc
            log.info("NATS connected", extra={"data": {
                "url": redact(self.url), "after_failed_attempts": self.failed_attempts,
                "max_payload": nc.max_payload,
            }})
            for callback in self._on_connect:
                try:
                    await callback(nc)
                except Exception:
                    log.exception("NATS on-connect callback failed")
            self._first.set()
            self._up.set()
            return

    async def _connect_once(self) -> Client:
        nc = _LeavingClient()
        # Servers that refuse TCP: two tries each (max_reconnect_attempts=1), then NoServersError. A server
        # that answers but fails the handshake (TLS, INFO, CONNECT): no second try (allow_reconnect=False),
        # the cause (a certificate refused, a server without TLS-first) is raised as it is, for the log
        # line. Either way our loop owns the backoff.
        wait = self._reconnect_wait
        try:
            await nc.connect(
                servers=server_list(self.url), name=self.name, token=self._token,
                connect_timeout=max(1, round(self._connect_timeout)),
                reconnect_time_wait=wait,  # type: ignore[arg-type]  # nats-py says int; it only sleeps on it
                max_reconnect_attempts=1, allow_reconnect=False,
                ping_interval=PING_INTERVAL_S, max_outstanding_pings=MAX_OUTSTANDING_PINGS,
                tls=self._tls,
                tls_handshake_first=self._tls is not None,
                error_cb=self._on_error, disconnected_cb=self._on_disconnected,
                reconnected_cb=self._on_reconnected, closed_cb=self._on_closed,
            )
        except BaseException:
            # Bounded: after a failed TLS handshake nats-py waits for ever for a socket the TLS layer took
            # over.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), self._connect_timeout)
            raise
        return nc

    # --- nats-py callbacks ---------------------------------------------------------------------------

    async def _on_error(self, exc: Exception) -> None:
        if isinstance(exc, NatsError) and PERMISSIONS_ERR in str(exc).lower():
            self.permission_violations += 1
            now = asyncio.get_running_loop().time()
            last = self._violation_logged_at
            if last is None or now - last >= UNREACHABLE_LOG_EVERY_S:
                self._violation_logged_at = now
                log.warning("NATS refused a message: not permitted for this identity", extra={"data": {
                    "url": redact(self.url), "error": _describe(exc),
                    "violations": self.permission_violations,
                }})
        elif self._nc is not None:  # before the first connection, the retry loop reports failures
            if not self._up.is_set():  # nats-py reports each failed reconnect attempt here
                self.reconnect_failures += 1
            log.debug("NATS error", extra={"data": {"error": _describe(exc)}})

    async def _on_disconnected(self) -> None:
        if self._nc is not None and not self._closed:
            self.disconnects += 1
            self._up.clear()
            log.warning("NATS disconnected; reconnecting", extra={"data": {"url": redact(self.url)}})

    async def _on_reconnected(self) -> None:
        self.reconnects += 1
        self._up.set()
        log.info("NATS reconnected", extra={"data": {"url": redact(self.url), "reconnects": self.reconnects}})

    async def _on_closed(self) -> None:
        if self._nc is not None and not self._closed:
            log.error("NATS connection closed", extra={"data": {"url": redact(self.url)}})


class _LeavingClient(Client):
    """nats-py's client, except that it leaves a broken connection at once. Before reconnecting, nats-py
    closes the old connection gracefully and waits until it is closed; over TLS that is a close_notify
    to the server and a wait for its answer, which a server cut off never sends: asyncio gives up after
    its SSL shutdown timeout, 30 s, and only then would the client try another server. Aborted instead,
    the connection is gone at once (what it still had to send was lost either way)."""

    async def _attempt_reconnect(self) -> None:
        writer = getattr(self._transport, "_io_writer", None)  # nats-py's TcpTransport: a StreamWriter
        if writer is not None:
            writer.transport.abort()
        await super()._attempt_reconnect()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
