"""Checks shared by every component's `--check-config`: URLs, bind addresses, log levels, TLS files.

Each returns one line naming the setting ("bbs_url: ...") or None. Nothing is resolved or connected
to: a host name is judged by its spelling, so a compose file's service names pass on any machine. The TLS
files are read: `serving_tls` is also what each component serves and calls its peers with.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from common.tls import CertError, Identity, TLSFiles, TLSOptions, client_context, server_context

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


@dataclass(frozen=True, slots=True)
class ServingTLS:
    """What a component with TLS files serves and calls its peers with: each context built once, shared
    by every connection."""

    files: TLSFiles
    identity: Identity  # the certificate's: the component's role and name (a rep's: the cells it speaks for)
    server: ssl.SSLContext
    client: ssl.SSLContext


def serving_tls(options: TLSOptions, listen: str, role: str) -> ServingTLS | None:
    """The TLS of a component of `role` listening on `listen`, or None for plain HTTP (authorization off:
    `--insecure`, or no TLS files on a loopback address). Raises CertError, one line naming the setting:
    files given by half, missing or unreadable, a key that does not match, a certificate of another role
    (its peers would refuse it what the component does), or plain HTTP on another address without
    `--insecure`."""
    files = options.serving_files(listen)
    if files is None:
        return None
    try:
        server, client = server_context(files), client_context(files)
    except (ssl.SSLError, OSError) as exc:  # the CA file (the contexts report the certificate and key)
        raise CertError(f"tls_ca: cannot load {files.ca}: {exc}") from None
    try:
        identity = files.identity()
    except ValueError as exc:
        raise CertError(f"tls_cert: {files.cert} is not a PEM certificate: {exc}") from None
    if identity is None or identity.role != role:
        stated = f"role {identity.role!r}" if identity is not None else "no Vendue role"
        raise CertError(
            f"tls_cert: {files.cert} states {stated}; the {role} needs one issued with --role {role}"
        )
    return ServingTLS(files, identity, server, client)


def tls_problem(options: TLSOptions, listen: str, role: str) -> str | None:
    try:
        serving_tls(options, listen, role)
    except CertError as exc:
        return str(exc)
    return None
