"""`vendue auctioneer --check-config`: the auctioneer's settings checked without starting anything.

Single-value ranges (a timeout of 0, a port above 65535) are refused by AuctioneerSettings itself;
this adds what needs parsing or several settings together. Nothing is resolved or connected to; the
TLS files are read (common.config_check.serving_tls, which `vendue auctioneer` serves with).
"""

from __future__ import annotations

from common.config_check import (
    first_problem,
    host_problem,
    log_level_problem,
    nats_url_problem,
    tls_problem,
    url_list_problem,
)
from placement.strategies import pickers

from .settings import AuctioneerSettings


def config_problem(settings: AuctioneerSettings) -> str | None:
    """The first problem found, as one line naming the setting ("strategy: ..."); None if sane."""
    return first_problem(
        url_list_problem("bbs_url", settings.bbs_url),
        nats_url_problem("nats_url", settings.nats_url),
        host_problem("listen", settings.listen),
        tls_problem(settings, settings.listen, "auctioneer"),
        log_level_problem(settings.log_level),
        _placement_problem(settings),
        _timing_problem(settings),
    )


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
