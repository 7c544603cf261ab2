"""Checks shared by every component's `--check-config`: URLs, bind addresses, log levels.

Each returns one line naming the setting ("bbs_url: ...") or None. Nothing is resolved or connected
to: a host name is judged by its spelling, so a compose file's service names pass on any machine.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
HTTP_SCHEMES = ("http", "https")
NATS_SCHEMES = ("nats", "tls", "ws", "wss")
_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


def url_problem(setting: str, url: str, schemes: tuple[str, ...] = HTTP_SCHEMES) -> str | None:
    """A URL with one of `schemes`, a host and, if any, a numeric port in range."""
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


def url_list_problem(setting: str, urls: str) -> str | None:
    """One HTTP URL or several comma-separated (replicas to fail over between, e.g. the BBS's)."""
    servers = [server.strip() for server in urls.split(",")]
    if not all(servers):
        return f"{setting}: empty URL in the list"
    return first_problem(*(url_problem(setting, server) for server in servers))


def nats_url_problem(setting: str, urls: str) -> str | None:
    """One NATS server URL or several comma-separated (a cluster); credentials allowed, never echoed."""
    servers = [server.strip() for server in urls.split(",")]
    if not all(servers):
        return f"{setting}: empty server in the list"
    for server in servers:
        problem = url_problem(setting, server, NATS_SCHEMES)
        if problem is not None:
            return problem
    return None


def host_problem(setting: str, host: str) -> str | None:
    """An IP address or a syntactically valid host name (not looked up)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.match(host):
            return f"{setting}: {host!r} is neither an IP address nor a host name"
    return None


def log_level_problem(level: str) -> str | None:
    if level.lower() in LOG_LEVELS:
        return None
    return f"log_level: not one of {', '.join(LOG_LEVELS)}"


def first_problem(*problems: str | None) -> str | None:
    return next((problem for problem in problems if problem is not None), None)
