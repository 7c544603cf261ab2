"""`vendue bbs --check-config`: the BBS's settings checked without starting anything.

Ranges of single values (a negative TTL, a port above 65535) are refused by BBSSettings itself;
this adds what needs parsing or several settings together: the database URL, the URLs the BBS
calls, and timings that contradict each other. Nothing is connected to.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from sqlalchemy.exc import ArgumentError

from .settings import BBSSettings
from .store.database import UnsupportedDatabase, database_url, is_sqlite

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
NATS_SCHEMES = ("nats", "tls", "ws", "wss")
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


def config_problem(settings: BBSSettings) -> str | None:
    """The first problem found, as one line naming the setting ("database_url: ..."); None if sane."""
    for problem in (
        _database_problem(settings),
        _url_problem("auctioneer_url", settings.auctioneer_url, ("http", "https")),
        _nats_problem(settings),
        _listen_problem(settings.listen),
        None
        if settings.log_level.lower() in LOG_LEVELS
        else f"log_level: not one of {', '.join(LOG_LEVELS)}",
        _timing_problem(settings),
    ):
        if problem is not None:
            return problem
    return None


def _database_problem(settings: BBSSettings) -> str | None:
    try:
        url = database_url(settings.resolved_database_url())
    except UnsupportedDatabase as exc:
        return f"database_url: {exc}"
    except (ArgumentError, ValueError):
        # The URL itself is not repeated: it may carry a password.
        return (
            "database_url: not a database URL (expected sqlite+aiosqlite:///PATH or "
            "postgresql+asyncpg://USER:PASSWORD@HOST:PORT/DATABASE)"
        )
    if url.port is not None and not 0 < url.port < 65536:
        return f"database_url: port {url.port} out of range"
    if is_sqlite(url) and url.database in (None, "", ":memory:"):
        # Every pooled connection would get a memory database of its own.
        return "database_url: an SQLite database must be a file, not in memory"
    return None


def _url_problem(setting: str, url: str, schemes: tuple[str, ...]) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError as exc:
        return f"{setting}: not a valid URL ({exc})"
    if parts.scheme not in schemes:
        return f"{setting}: scheme must be {' or '.join(schemes)}, not {parts.scheme or 'missing'!r}"
    if not parts.hostname:
        return f"{setting}: no host in the URL"
    return None


def _nats_problem(settings: BBSSettings) -> str | None:
    servers = [server.strip() for server in settings.nats_url.split(",")]
    if not all(servers):
        return "nats_url: empty server in the list"
    for server in servers:
        problem = _url_problem("nats_url", server, NATS_SCHEMES)
        if problem is not None:
            return problem
    return None


def _listen_problem(listen: str) -> str | None:
    try:
        ipaddress.ip_address(listen)
    except ValueError:
        if not _HOSTNAME.match(listen):
            return f"listen: {listen!r} is neither an IP address nor a host name"
    return None


def _timing_problem(s: BBSSettings) -> str | None:
    if s.crash_backoff_min > s.crash_backoff_max:
        return f"crash_backoff_min: {s.crash_backoff_min}s exceeds crash_backoff_max ({s.crash_backoff_max}s)"
    if s.kick_task >= s.expire_pending_task:
        return (
            f"kick_task: {s.kick_task}s is not below expire_pending_task ({s.expire_pending_task}s): "
            "a pending task would expire before it is re-auctioned"
        )
    if s.forget_cell_after < s.presence_ttl:
        return (
            f"forget_cell_after: {s.forget_cell_after}s is below presence_ttl ({s.presence_ttl}s): "
            "a live cell's row would be dropped"
        )
    if s.http_timeout >= s.lease_ttl:
        return (
            f"http_timeout: {s.http_timeout}s is not below lease_ttl ({s.lease_ttl}s): a convergence pass "
            "waiting on one slow rep would outlast its lease"
        )
    return None
