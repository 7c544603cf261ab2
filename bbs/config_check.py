"""`vendue bbs --check-config`: the BBS's settings checked without starting anything.

Ranges of single values (a negative TTL, a port above 65535) are refused by BBSSettings itself;
this adds what needs parsing or several settings together: the database URL, the URLs the BBS
calls, and timings that contradict each other. Nothing is connected to; the TLS files are read
(common.config_check.serving_tls, which `vendue bbs` serves with).
"""

from __future__ import annotations

from sqlalchemy.exc import ArgumentError

from common.config_check import (
    HTTP_SCHEMES,
    first_problem,
    host_problem,
    log_level_problem,
    nats_url_problem,
    tls_problem,
    url_problem,
)

from .encryption import KeyRingError
from .images import registry_problem
from .settings import BBSSettings
from .store.database import UnsupportedDatabase, database_url, is_sqlite


def config_problem(settings: BBSSettings) -> str | None:
    """The first problem found, as one line naming the setting ("database_url: ..."); None if sane."""
    return first_problem(
        _database_problem(settings),
        url_problem("auctioneer_url", settings.auctioneer_url, HTTP_SCHEMES),
        nats_url_problem("nats_url", settings.nats_url),
        host_problem("listen", settings.listen),
        tls_problem(settings, settings.listen, "bbs"),
        _key_ring_problem(settings),
        registry_problem(settings.insecure_registry, settings.registry_ca),
        log_level_problem(settings.log_level),
        _timing_problem(settings),
    )


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


def _key_ring_problem(settings: BBSSettings) -> str | None:
    """The key ring readable (its file 0600 or stricter), well formed, its active key among its keys."""
    try:
        settings.key_ring()
    except KeyRingError as exc:
        return str(exc)
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
