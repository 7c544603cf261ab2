"""`vendue auctioneer`: the auction service. Flags override `VENDUE_*` environment variables.

    vendue auctioneer [--bbs-url URL] [--listen HOST] [--port N] [--strategy NAME] [--cell-state-timeout S]
                      [--max-attempts N] [--max-inflight-starts N] [--ready-file PATH]
                      [--transport http|nats] [--nats-url URL] [--lease-ttl S] [--advertise-url URL]
                      [--explanations N]
                      [--tls-cert PEM --tls-key PEM --tls-ca PEM | --insecure] [--check-config]

With the three TLS files it serves HTTPS and authorizes every request (docs/security.md); without them
only on a loopback address, or anywhere with --insecure (plain HTTP, authorization off, a warning).
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, bad_input, fail
from .component_flags import (
    INSECURE_FLAG,
    LOG_FORMAT_FLAG,
    TLS_CA_FLAG,
    TLS_KEY_FLAG,
    tls_cert_flag,
    tls_settings,
)
from .limit_flags import (
    MAX_BODY_BYTES,
    MAX_BULK_BODY_BYTES,
    MAX_CONCURRENT_REQUESTS,
    REQUEST_TIMEOUT,
    limit_settings,
)


@app.command(cls=OneLineErrorsCommand)
def auctioneer(
    bbs_url: str | None = typer.Option(
        None,
        "--bbs-url",
        help="The BBS; several comma-separated replicas fail "
        "over [env VENDUE_BBS_URL; http://127.0.0.1:8889].",
    ),
    listen: str | None = typer.Option(None, "--listen", help="Address to bind [VENDUE_LISTEN; 127.0.0.1]."),
    port: int | None = typer.Option(None, "--port", help="Port; 0 binds a free one [VENDUE_PORT; 8890]."),
    strategy: str | None = typer.Option(
        None, "--strategy", help="Placement strategy [VENDUE_STRATEGY; diego]."
    ),
    engine: str | None = typer.Option(None, "--engine", help="fast or reference [VENDUE_ENGINE; fast]."),
    cell_state_timeout: float | None = typer.Option(
        None,
        "--cell-state-timeout",
        help="Seconds to fetch every cell's state [VENDUE_CELL_STATE_TIMEOUT; 5].",
    ),
    work_timeout: float | None = typer.Option(None, "--work-timeout", help="Seconds per work POST [10]."),
    max_attempts: int | None = typer.Option(
        None, "--max-attempts", help="Tries before rejected work is a failure [VENDUE_MAX_ATTEMPTS; 3]."
    ),
    max_inflight_starts: int | None = typer.Option(
        None,
        "--max-inflight-starts",
        help="Starting-container limit, 0 for none [VENDUE_MAX_INFLIGHT_STARTS; 0].",
    ),
    ready_file: Path | None = typer.Option(
        None, "--ready-file", help='Once serving, write {"url": ..., "pid": ...} here [VENDUE_READY_FILE].'
    ),
    log_level: str | None = typer.Option(
        None, "--log-level", help="debug, info, warning [VENDUE_LOG_LEVEL]."
    ),
    log_format: str | None = LOG_FORMAT_FLAG,
    transport: str | None = typer.Option(
        None, "--transport", help="http or nats: how requests, bids and work travel [VENDUE_TRANSPORT; http]."
    ),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        help="NATS server(s), credentials allowed [VENDUE_NATS_URL; nats://127.0.0.1:4222]; "
        "token also from VENDUE_NATS_TOKEN.",
    ),
    lease_ttl: float | None = typer.Option(
        None,
        "--lease-ttl",
        help="Seconds the elected auctioneer's lease lasts; renewed every TTL/3 [VENDUE_LEASE_TTL; 15].",
    ),
    advertise_url: str | None = typer.Option(
        None,
        "--advertise-url",
        help="Where the other auctioneers and the BBS reach this one while it leads "
        "[VENDUE_ADVERTISE_URL; the URL it listens on].",
    ),
    explanations: int | None = typer.Option(
        None,
        "--explanations",
        help="Instances per auction whose placement is explained to the BBS for "
        "`vendue why` (candidates and scores, or the per-filter breakdown; about 1 KB each), 0 for none "
        "[VENDUE_EXPLANATIONS; 200].",
    ),
    tls_cert: Path | None = tls_cert_flag("auctioneer"),
    tls_key: Path | None = TLS_KEY_FLAG,
    tls_ca: Path | None = TLS_CA_FLAG,
    insecure: bool = INSECURE_FLAG,
    max_body_bytes: int | None = MAX_BODY_BYTES,
    max_bulk_body_bytes: int | None = MAX_BULK_BODY_BYTES,
    request_timeout: float | None = REQUEST_TIMEOUT,
    max_concurrent_requests: int | None = MAX_CONCURRENT_REQUESTS,
    check_config: bool = typer.Option(
        False, "--check-config", help="Validate the settings and exit: 0, or 2 and the setting at fault."
    ),
) -> None:
    """Run the auctioneer: batch start requests, auction them over the cells, send work to the reps."""
    from auctioneer.app import create_app
    from auctioneer.server import bind, run, url_of
    from auctioneer.settings import AuctioneerSettings
    from common.config_check import serving_tls
    from common.failover import split_urls
    from common.logging import setup_logging
    from common.tls import CertError
    from placement.strategies import pickers

    flags = {
        "bbs_url": bbs_url, "listen": listen, "port": port, "strategy": strategy, "engine": engine,
        "cell_state_timeout": cell_state_timeout, "work_timeout": work_timeout, "max_attempts": max_attempts,
        "max_inflight_starts": max_inflight_starts, "ready_file": ready_file, "log_level": log_level,
        "log_format": log_format,
        "transport": transport, "nats_url": nats_url, "lease_ttl": lease_ttl, "advertise_url": advertise_url,
        "explanations": explanations,
        **tls_settings(tls_cert, tls_key, tls_ca, insecure),
        **limit_settings(max_body_bytes, max_bulk_body_bytes, request_timeout, max_concurrent_requests),
    }
    try:
        settings = AuctioneerSettings(**{k: v for k, v in flags.items() if v is not None})
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
    status = run(create_app(settings), sock, settings.ready_file, settings.shutdown_timeout, ssl_context)
    raise typer.Exit(status)

