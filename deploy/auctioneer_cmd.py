"""`vendue auctioneer`: the auction service. A flag per setting of auctioneer/settings.py
(deploy/settings_flags.py); each overrides the setting's `VENDUE_*` environment variable.

    vendue auctioneer [--bbs-url URL] [--listen HOST] [--port N] [--strategy NAME] ... [--check-config]

With the three TLS files it serves HTTPS and authorizes every request (docs/security.md); without them
only on a loopback address, or anywhere with --insecure (plain HTTP, authorization off, a warning).
"""

from __future__ import annotations

from typing import Any

import typer
from pydantic import ValidationError

from auctioneer.settings import AuctioneerSettings

from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, bad_input, fail
from .settings_flags import with_settings_flags


@app.command(cls=OneLineErrorsCommand)
@with_settings_flags(AuctioneerSettings, role="auctioneer")
def auctioneer(
    settings_given: dict[str, Any] | None = None,  # a flag per setting in its place (settings_flags.py)
    check_config: bool = typer.Option(
        False, "--check-config", help="Validate the settings and exit: 0, or 2 and the setting at fault."
    ),
) -> None:
    """Run the auctioneer: batch start requests, auction them over the cells, send work to the reps."""
    from auctioneer.app import create_app
    from auctioneer.server import bind, run, url_of
    from common.config_check import serving_tls
    from common.failover import split_urls
    from common.logging import setup_logging
    from common.tls import CertError
    from placement.strategies import pickers

    try:
        settings = AuctioneerSettings(**(settings_given or {}))
        offered = pickers(settings.engine)
    except ValidationError as exc:
        first = exc.errors()[0]
        bad_input(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
    except ValueError as exc:
        fail(f"--engine: {exc}", USAGE_ERROR)
    if settings.strategy not in offered:
        bad_input(f"strategy: unknown strategy {settings.strategy!r} (expected one of {', '.join(offered)})")
    if check_config:
        from auctioneer.config_check import config_problem

        problem = config_problem(settings)
        if problem is not None:
            bad_input(problem)
        typer.echo("config ok")
        raise typer.Exit(0)

    try:
        split_urls(settings.bbs_url)
    except ValueError as exc:
        bad_input(f"bbs_url: {exc}")
    try:
        tls = serving_tls(settings, settings.listen, "auctioneer")  # built once: every connection shares it
    except CertError as exc:
        bad_input(str(exc))
    ssl_context = tls.server if tls is not None else None
    log = setup_logging("auctioneer", settings.log_level, settings.log_format)
    try:
        sock = bind(settings.listen, settings.port)
    except OSError as exc:
        fail(f"--port: cannot bind {settings.listen}:{settings.port}: {exc.strerror or exc}", USAGE_ERROR)
    url = url_of(sock, tls=ssl_context is not None)
    log.info("listening", extra={"data": {"url": url}})
    if settings.advertise_url is None:  # known only now: --port 0 binds a free port
        settings = settings.model_copy(update={"advertise_url": url})
    status = run(create_app(settings), sock, settings.ready_file, settings.shutdown_timeout, ssl_context,
                 limits=settings)
    raise typer.Exit(status)

