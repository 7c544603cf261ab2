"""`vendue rep --check-config`: the rep's settings checked without starting anything.

Single-value ranges (presence TTL > 0, evacuation timeout >= 0, memory/disk/containers >= 1, the
executor's name) are refused by RepSettings itself; this adds what needs parsing or several settings
together. Nothing is resolved, created or connected to: the data dir need not exist yet. The TLS files are
read (common.config_check.serving_tls, which `vendue rep` serves and calls the BBS with), and so are this
process's cgroups for the process executor's isolation (rep/isolation.py: root, the controllers).
"""

from __future__ import annotations

import re
import ssl

from common.config_check import (
    first_problem,
    host_problem,
    log_level_problem,
    nats_url_problem,
    tls_problem,
    url_list_problem,
)
from common.models import GUID_PATTERN

from .isolation import isolation_problem
from .settings import RepSettings

_GUID = re.compile(GUID_PATTERN)


def config_problem(settings: RepSettings) -> str | None:
    """The first problem found, as one line naming the setting ("zone: ..."); None if sane."""
    return first_problem(
        url_list_problem("bbs_url", settings.bbs_url),
        nats_url_problem("nats_url", settings.nats_url),
        host_problem("listen", settings.listen),
        tls_problem(settings, settings.listen, "rep"),
        # Goes into the rep URL the auctioneer and BBS call and into every instance's address.
        host_problem("advertise_host", settings.advertise_host),
        log_level_problem(settings.log_level),
        _cell_problem(settings),
        isolation_problem(settings),
        artifact_ca_problem(settings),
    )


def artifact_ca_problem(s: RepSettings) -> str | None:
    if s.artifact_ca is None:
        return None
    try:
        ssl.create_default_context().load_verify_locations(cafile=str(s.artifact_ca))
    except (OSError, ssl.SSLError) as exc:
        return f"artifact_ca: {s.artifact_ca} is not a readable PEM CA bundle ({exc.__class__.__name__})"
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
