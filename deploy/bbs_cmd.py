"""`vendue bbs`: serve the BBS; `vendue bbs migrate`: bring its database schema up to date.

Every flag overrides the matching VENDUE_* environment variable (see bbs/settings.py).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import typer

from common import runtime

from .cli import app
from .cli_style import OneLineErrorsCommand, OneLineErrorsGroup, bad_input, fail
from .component_flags import (
    INSECURE_FLAG,
    LOG_FORMAT_FLAG,
    TLS_CA_FLAG,
    TLS_KEY_FLAG,
    tls_cert_flag,
    tls_settings,
)
from .limit_flags import MAX_BODY_BYTES, MAX_BULK_BODY_BYTES, MAX_CONCURRENT_REQUESTS, REQUEST_TIMEOUT

bbs_app = typer.Typer(
    help="The BBS: desired and actual state, tasks, cell presence, convergence, events.",
    invoke_without_command=True,
    no_args_is_help=False,
    cls=OneLineErrorsGroup,
)
app.add_typer(bbs_app, name="bbs")


def _settings(**flags: Any):
    from pydantic import ValidationError

    from bbs.settings import BBSSettings

    given = {name: value for name, value in flags.items() if value is not None}
    try:
        return BBSSettings(**given)
    except ValidationError as exc:
        # One line naming the setting (pydantic's own message spans several).
        first = exc.errors()[0]
        setting = ".".join(str(part) for part in first["loc"]) or "settings"
        bad_input(f"{setting}: {first['msg']}")
    except ValueError as exc:
        bad_input(str(exc))


@bbs_app.callback()
def bbs(
    ctx: typer.Context,
    listen: str | None = typer.Option(None, "--listen", help="Address to bind [VENDUE_LISTEN; 127.0.0.1]."),
    port: int | None = typer.Option(None, "--port", help="Port; 0 picks a free one [VENDUE_PORT; 8889]."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Data folder [VENDUE_DATA_DIR; .vendue]."),
    database_url: str | None = typer.Option(
        None,
        "--database-url",
        help="SQLAlchemy async URL [VENDUE_DATABASE_URL; sqlite+aiosqlite:///<data-dir>/bbs.db].",
    ),
    sqlite_synchronous: str | None = typer.Option(
        None,
        "--sqlite-synchronous",
        help="SQLite: full (an acknowledged write survives a power loss) or normal (only a crash of the BBS; "
        "faster) [VENDUE_SQLITE_SYNCHRONOUS; full].",
    ),
    auctioneer_url: str | None = typer.Option(
        None, "--auctioneer-url", help="Auctioneer base URL [VENDUE_AUCTIONEER_URL; http://127.0.0.1:8890]."
    ),
    ready_file: Path | None = typer.Option(None, "--ready-file", help="Write {url, pid} here once serving."),
    log_level: str | None = typer.Option(None, "--log-level", help="debug, info, warning, error."),
    log_format: str | None = LOG_FORMAT_FLAG,
    http_timeout: float | None = typer.Option(
        None, "--http-timeout", help="Seconds per outgoing HTTP call [5]."
    ),
    convergence_interval: float | None = typer.Option(None, "--convergence-interval", help="Seconds [5]."),
    presence_ttl: float | None = typer.Option(
        None, "--presence-ttl", help="Cell presence TTL, seconds [10]."
    ),
    stale_unclaimed: float | None = typer.Option(None, "--stale-unclaimed", help="Re-auction after, s [30]."),
    kick_task: float | None = typer.Option(
        None, "--kick-task", help="Re-auction a pending task after, s [30]."
    ),
    expire_pending_task: float | None = typer.Option(None, "--expire-pending-task", help="Seconds [1800]."),
    expire_completed_task: float | None = typer.Option(
        None, "--expire-completed-task", help="Seconds [120]."
    ),
    task_retries: int | None = typer.Option(
        None, "--task-retries", help="Placement rejections before a task fails [3]."
    ),
    immediate_restarts: int | None = typer.Option(
        None, "--immediate-restarts", help="Crash counts below this restart at once [3]."
    ),
    crash_backoff_min: float | None = typer.Option(
        None, "--crash-backoff-min", help="First crash backoff, s [30]."
    ),
    crash_backoff_max: float | None = typer.Option(
        None, "--crash-backoff-max", help="Longest crash backoff, s [960]."
    ),
    max_restarts: int | None = typer.Option(
        None, "--max-restarts", help="No restart after this many crashes [200]."
    ),
    crash_reset_after: float | None = typer.Option(
        None, "--crash-reset-after", help="Running this long resets the crash count, s [300]."
    ),
    lease_ttl: float | None = typer.Option(None, "--lease-ttl", help="Convergence lease TTL, s [15]."),
    cell_loss_grace: float | None = typer.Option(
        None,
        "--cell-loss-grace",
        help="keep-replicas LRPs: wait this long after a cell's presence expired before its check, s [30].",
    ),
    cell_loss_check: float | None = typer.Option(
        None,
        "--cell-loss-check",
        help="How long the check (and a late claim's) waits for the cell's rep to answer, s [5].",
    ),
    rebalance_interval: float | None = typer.Option(
        None, "--rebalance-interval",
        help="Look this often for a cell that appeared or returned, then plan and carry out rebalancing "
        "moves until a plan finds nothing (at most 4 plans), s [0: off].",
    ),
    rebalance_in_flight: int | None = typer.Option(
        None, "--rebalance-in-flight", help="Rebalancing moves in flight at most, one per app [5]."
    ),
    rebalance_moves_per_minute: int | None = typer.Option(
        None, "--rebalance-moves-per-minute",
        help="Rebalancing moves started per minute at most [0: one per present cell, at least 60].",
    ),
    rebalance_move_timeout: float | None = typer.Option(
        None, "--rebalance-move-timeout",
        help="A move whose replacement does not run by then is abandoned, s [120].",
    ),
    rebalance_load_tolerance: float | None = typer.Option(
        None, "--rebalance-load-tolerance",
        help="Memory fraction a cell may be above the mean; loadmark apps: ×100 load-mark points [0.10].",
    ),
    rebalance_strategy_margin: float | None = typer.Option(
        None, "--rebalance-strategy-margin",
        help="Move an instance when another cell beats its own by this much of its strategy's score [0.2].",
    ),
    check_config: bool = typer.Option(
        False, "--check-config", help="Validate the settings and exit: 0, or 2 and the setting at fault."
    ),
    transport: str | None = typer.Option(
        None,
        "--transport",
        help="http or nats: auction requests, stops and cancels, events [VENDUE_TRANSPORT].",
    ),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        help="NATS server(s), credentials allowed [VENDUE_NATS_URL]; token: VENDUE_NATS_TOKEN.",
    ),
    tls_cert: Path | None = tls_cert_flag("bbs"),
    tls_key: Path | None = TLS_KEY_FLAG,
    tls_ca: Path | None = TLS_CA_FLAG,
    encryption_keys_file: Path | None = typer.Option(
        None,
        "--encryption-keys-file",
        help="Key ring sealing command and env at rest, mode 0600 [VENDUE_ENCRYPTION_KEYS_FILE; or its JSON "
        "in VENDUE_ENCRYPTION_KEYS]. Without one they are stored in the clear.",
    ),
    insecure: bool = INSECURE_FLAG,
    max_body_bytes: int | None = MAX_BODY_BYTES,
    max_bulk_body_bytes: int | None = MAX_BULK_BODY_BYTES,
    request_timeout: float | None = REQUEST_TIMEOUT,
    max_concurrent_requests: int | None = MAX_CONCURRENT_REQUESTS,
    max_lrps: int | None = typer.Option(
        None, "--max-lrps", help="Desired LRPs at most; more is 429 [VENDUE_MAX_LRPS; 100000]."
    ),
    max_instances: int | None = typer.Option(
        None, "--max-instances", help="Desired instances in total at most [VENDUE_MAX_INSTANCES; 1000000]."
    ),
    max_event_subscribers: int | None = typer.Option(
        None,
        "--max-event-subscribers",
        help="Open event streams at most [VENDUE_MAX_EVENT_SUBSCRIBERS; 256].",
    ),
    max_explanations: int | None = typer.Option(
        None, "--max-explanations", help="Placement explanations kept in memory for `vendue why`, the latest "
        "per instance [VENDUE_MAX_EXPLANATIONS; 20000]."
    ),
    callback_allow: list[str] = typer.Option(
        [],
        "--callback-allow",
        help="A host task callbacks may name although link-local or a metadata service, "
        "repeatable [VENDUE_CALLBACK_ALLOW, a JSON list].",
    ),
) -> None:
    """Serve the BBS (HTTP API, event stream, convergence loop) until SIGTERM or SIGINT."""
    tls = tls_settings(tls_cert, tls_key, tls_ca, insecure)
    flags = {k: v for k, v in locals().items() if k not in ("ctx", "check_config", "tls", *tls)}
    flags["callback_allow"] = callback_allow or None
    settings = _settings(**flags, **tls)
    ctx.obj = settings
    if check_config:
        from bbs.config_check import config_problem

        problem = config_problem(settings)
        if problem is not None:
            bad_input(problem)
        typer.echo("config ok")
        raise typer.Exit(0)
    if ctx.invoked_subcommand is not None:
        return
    from bbs.encryption import KeyRingError
    from bbs.server import serve
    from bbs.store.database import SchemaTooNew
    from common.logging import setup_logging
    from common.tls import CertError

    log = setup_logging("bbs", settings.log_level, settings.log_format)
    try:
        runtime.run(serve(settings))
    except SchemaTooNew as exc:
        log.error(str(exc))  # one line, not a traceback: the operator's next step is in it
        raise typer.Exit(1) from None
    except (CertError, KeyRingError) as exc:  # TLS files or key ring unusable, plain HTTP where refused
        bad_input(str(exc))


@bbs_app.command(cls=OneLineErrorsCommand)
def migrate(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print the revision as JSON."),
) -> None:
    """Create or upgrade the BBS database schema, then exit (`vendue bbs --database-url URL migrate`)."""
    from bbs.store.database import SchemaTooNew, create_engine, schema_revision
    from bbs.store.database import migrate as run_migrations
    from common.logging import setup_logging

    settings = ctx.obj
    setup_logging("bbs", settings.log_level, settings.log_format)

    async def run() -> tuple[str | None, str | None]:
        engine = create_engine(settings.resolved_database_url(),
                               sqlite_synchronous=settings.sqlite_synchronous)
        try:
            await run_migrations(engine)
            return await schema_revision(engine)
        finally:
            await engine.dispose()

    try:
        current, _head = asyncio.run(run())
    except SchemaTooNew as exc:
        fail(str(exc))
    typer.echo(json.dumps({"revision": current}) if as_json else f"database at revision {current}")


@bbs_app.command("rotate-keys", cls=OneLineErrorsCommand)
def rotate_keys(
    ctx: typer.Context,
    batch: int = typer.Option(200, "--batch", min=1, max=10_000, help="Rows per transaction."),
    as_json: bool = typer.Option(False, "--json", help="Print what was done as JSON."),
) -> None:
    """Seal every desired LRP and task again with the key ring's active key, a batch per transaction.

    Safe while the BBS serves; run it again after an interruption (a second run changes nothing).
    Every BBS replica needs the new key in its ring first (docs/security.md, "Encryption at rest").
    """
    from bbs.encryption import KeyRingError
    from bbs.store import Store
    from bbs.store.database import SchemaTooNew
    from bbs.store.rotation import required
    from bbs.store.rotation import rotate_keys as run_rotation
    from common.logging import setup_logging

    settings = ctx.obj
    setup_logging("bbs", settings.log_level, settings.log_format)

    async def run():
        keys = required(settings.key_ring())  # before the database is opened (or made)
        store = await Store.open(settings.resolved_database_url(), keys=keys,
                                 sqlite_synchronous=settings.sqlite_synchronous)
        try:
            return await run_rotation(store, batch)
        finally:
            await store.close()

    try:
        rotation = asyncio.run(run())
    except KeyRingError as exc:
        bad_input(str(exc))
    except SchemaTooNew as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(rotation.to_json()))
        return
    done = rotation.resealed
    typer.echo(f"sealed {done['desired_lrps']} desired LRPs and {done['tasks']} tasks with key "
               f"{rotation.active!r} in {rotation.batches} batches")
    for table, labels in rotation.labels.items():
        typer.echo(f"{table}: " + (", ".join(f"{rows} {label}" for label, rows in labels.items()) or "none"))
