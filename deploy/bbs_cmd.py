"""`vendue bbs`: serve the BBS; `vendue bbs migrate`: bring its database schema up to date.

A flag per setting of bbs/settings.py (deploy/settings_flags.py); each overrides the setting's VENDUE_*
environment variable.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import typer

from bbs.settings import BBSSettings
from common import runtime

from .cli import app
from .cli_style import OneLineErrorsCommand, OneLineErrorsGroup, bad_input, fail
from .settings_flags import ENV_NOTE, with_settings_flags

bbs_app = typer.Typer(
    help=f"The BBS: desired and actual state, tasks, cell presence, convergence, events.\n\n{ENV_NOTE}",
    invoke_without_command=True,
    no_args_is_help=False,
    cls=OneLineErrorsGroup,
)
app.add_typer(bbs_app, name="bbs")


def _settings(**flags: Any) -> BBSSettings:
    """The settings: the flags given (None: not given), else the environment, else the defaults."""
    from pydantic import ValidationError

    try:
        return BBSSettings(**{name: value for name, value in flags.items() if value is not None})
    except ValidationError as exc:
        # One line naming the setting (pydantic's own message spans several).
        first = exc.errors()[0]
        setting = ".".join(str(part) for part in first["loc"]) or "settings"
        bad_input(f"{setting}: {first['msg']}")
    except ValueError as exc:
        bad_input(str(exc))


# The help's panels besides "Options" (and the mixins' TLS, serving limits and quotas).
PANELS = {
    "Convergence": ("convergence_interval", "presence_ttl", "stale_unclaimed", "kick_task",
                    "expire_pending_task", "expire_completed_task", "task_retention",
                    "max_completed_tasks", "task_retries", "lease_ttl",
                    "forget_cell_after", "cell_loss_grace", "cell_loss_check"),
    "Crash restarts": ("immediate_restarts", "crash_backoff_min", "crash_backoff_max", "max_restarts",
                       "crash_reset_after"),
    "Images": ("insecure_registry", "registry_ca", "registry_timeout"),
    "Rebalancing": ("rebalance_in_flight", "rebalance_moves_per_minute", "rebalance_move_timeout",
                    "rebalance_load_tolerance", "rebalance_strategy_margin", "rebalance_interval"),
}


@bbs_app.callback()
@with_settings_flags(BBSSettings, role="bbs", panels=PANELS)
def bbs(
    ctx: typer.Context,
    settings_given: dict[str, Any] | None = None,  # a flag per setting in its place (settings_flags.py)
    check_config: bool = typer.Option(
        False, "--check-config", help="Validate the settings and exit: 0, or 2 and the setting at fault."
    ),
) -> None:
    """Serve the BBS (HTTP API, event stream, convergence loop) until SIGTERM or SIGINT."""
    settings = _settings(**(settings_given or {}))
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
    typer.echo(f"sealed {done['desired_lrps']} desired LRPs, {done['tasks']} tasks and "
               f"{done['lrp_versions']} versions of LRPs with key "
               f"{rotation.active!r} in {rotation.batches} batches")
    for table, labels in rotation.labels.items():
        typer.echo(f"{table}: " + (", ".join(f"{rows} {label}" for label, rows in labels.items()) or "none"))
