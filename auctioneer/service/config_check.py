"""`vendue auctioneer --check-config`: the auctioneer's settings checked without starting anything.

Single-value ranges (a timeout of 0, a port above 65535) are refused by AuctioneerSettings itself;
this adds what needs parsing or several settings together. Nothing is resolved or connected to; the
TLS files are read (`serving_context`, which `vendue auctioneer` serves with).
"""

from __future__ import annotations

import ssl

from auctioneer.engine.strategies import pickers
from common.config_check import (
    first_problem,
    host_problem,
    log_level_problem,
    nats_url_problem,
    url_list_problem,
)
from common.tls import CertError, server_context

from .settings import AuctioneerSettings


def config_problem(settings: AuctioneerSettings) -> str | None:
    """The first problem found, as one line naming the setting ("strategy: ..."); None if sane."""
    return first_problem(
        url_list_problem("bbs_url", settings.bbs_url),
        nats_url_problem("nats_url", settings.nats_url),
        host_problem("listen", settings.listen),
        tls_problem(settings),
        log_level_problem(settings.log_level),
        _placement_problem(settings),
        _timing_problem(settings),
    )


def serving_context(settings: AuctioneerSettings) -> ssl.SSLContext | None:
    """The TLS context to serve HTTPS with, or None for plain HTTP (authorization off: `--insecure`, or no
    TLS files on a loopback address). Raises CertError, one line naming the setting: files given by half,
    missing or unreadable, a key that does not match, a certificate that is not an auctioneer's (the BBS
    would refuse it the lease), or plain HTTP on another address without `--insecure`."""
    files = settings.serving_files(settings.listen)
    if files is None:
        return None
    try:
        context = server_context(files)
    except ssl.SSLError as exc:  # the CA file (server_context reports the certificate and key itself)
        raise CertError(f"tls_ca: cannot load {files.ca}: {exc}") from None
    try:
        identity = files.identity()
    except ValueError as exc:
        raise CertError(f"tls_cert: {files.cert} is not a PEM certificate: {exc}") from None
    if identity is None or identity.role != "auctioneer":
        stated = f"role {identity.role!r}" if identity is not None else "no Vendue role"
        raise CertError(f"tls_cert: {files.cert} states {stated}; the auctioneer needs one issued with "
                        "--role auctioneer")
    return context


def tls_problem(settings: AuctioneerSettings) -> str | None:
    try:
        serving_context(settings)
    except CertError as exc:
        return str(exc)
    return None


def _placement_problem(settings: AuctioneerSettings) -> str | None:
    try:
        offered = pickers(settings.engine)
    except ValueError as exc:
        return f"engine: {exc}"
    if settings.strategy not in offered:
        return f"strategy: unknown strategy {settings.strategy!r} (expected one of {', '.join(offered)})"
    return None


def _timing_problem(s: AuctioneerSettings) -> str | None:
    # One auction fetches every cell's state and then sends the work; cut off by auction_timeout
    # before both could time out, a slow cell would cancel the whole auction instead of dropping out.
    if s.cell_state_timeout + s.work_timeout >= s.auction_timeout:
        return (
            f"auction_timeout: {s.auction_timeout}s is not above cell_state_timeout + work_timeout "
            f"({s.cell_state_timeout}s + {s.work_timeout}s)"
        )
    return None
