"""`vendue rep --check-config`: the rep's settings checked without starting anything.

Single-value ranges (presence TTL > 0, evacuation timeout >= 0, memory/disk/containers >= 1, the
executor's name) are refused by RepSettings itself; this adds what needs parsing or several settings
together. Nothing is resolved, created or connected to: the data dir need not exist yet. The TLS files are
read (`serving_tls`, which `vendue rep` serves and calls the BBS with).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

from common.config_check import (
    first_problem,
    host_problem,
    log_level_problem,
    nats_url_problem,
    url_list_problem,
)
from common.models import GUID_PATTERN
from common.tls import CertError, Identity, TLSFiles, client_context, server_context

from .settings import RepSettings

_GUID = re.compile(GUID_PATTERN)


def config_problem(settings: RepSettings) -> str | None:
    """The first problem found, as one line naming the setting ("zone: ..."); None if sane."""
    return first_problem(
        url_list_problem("bbs_url", settings.bbs_url),
        nats_url_problem("nats_url", settings.nats_url),
        host_problem("listen", settings.listen),
        tls_problem(settings),
        # Goes into the rep URL the auctioneer and BBS call and into every instance's address.
        host_problem("advertise_host", settings.advertise_host),
        log_level_problem(settings.log_level),
        _cell_problem(settings),
    )


@dataclass(frozen=True, slots=True)
class RepTLS:
    """What a rep with TLS files serves and calls with: each context built once, shared by every
    connection."""

    files: TLSFiles
    identity: Identity  # the certificate's: the process's name (rep_id) and the cells it may speak for
    server: ssl.SSLContext
    client: ssl.SSLContext


def serving_tls(settings: RepSettings) -> RepTLS | None:
    """The rep's TLS, or None for plain HTTP (authorization off: `--insecure`, or no TLS files on a
    loopback address). Raises CertError, one line naming the setting: files given by half, missing or
    unreadable, a key that does not match, a certificate that is not a rep's (the BBS would refuse its
    heartbeats), or plain HTTP on another address without `--insecure`."""
    files = settings.serving_files(settings.listen)
    if files is None:
        return None
    try:
        server, client = server_context(files), client_context(files)
    except ssl.SSLError as exc:  # the CA file (the contexts report the certificate and key themselves)
        raise CertError(f"tls_ca: cannot load {files.ca}: {exc}") from None
    try:
        identity = files.identity()
    except ValueError as exc:
        raise CertError(f"tls_cert: {files.cert} is not a PEM certificate: {exc}") from None
    if identity is None or identity.role != "rep":
        stated = f"role {identity.role!r}" if identity is not None else "no Vendue role"
        raise CertError(f"tls_cert: {files.cert} states {stated}; a rep needs one issued with --role rep")
    return RepTLS(files, identity, server, client)


def tls_problem(settings: RepSettings) -> str | None:
    try:
        serving_tls(settings)
    except CertError as exc:
        return str(exc)
    return None


def _cell_problem(s: RepSettings) -> str | None:
    if s.cell_id is not None and not _GUID.match(s.cell_id):
        return f"cell_id: {s.cell_id!r} is not a guid (letters, digits, _.-; starting with a letter or digit)"
    if not s.zone.strip():
        return "zone: empty (zone spreading would put every such cell in one unnamed zone)"
    if s.cells > 1 and s.executor != "sim":
        return "cells: only the sim executor can host more than one cell in a process"
    for setting, names in (
        ("stacks", s.stacks),
        ("placement_tags", s.placement_tags),
        ("optional_placement_tags", s.optional_placement_tags),
        ("volume_drivers", s.volume_drivers),
    ):
        if any(not name.strip() for name in names):
            return f"{setting}: empty name in the list"
    return None
