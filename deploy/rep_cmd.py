"""`vendue rep`: run a cell agent (or, with --sim --cells N, N simulated cells in one process).

Settings come from `VENDUE_*` environment variables (rep/settings.py); a flag per setting
(deploy/settings_flags.py), given here, overrides its variable.
With `--tls-cert/--tls-key/--tls-ca` it serves HTTPS and authorizes every request (docs/security.md);
without them only on a loopback address, or anywhere with --insecure (plain HTTP, authorization off, a
warning).
"""

from __future__ import annotations

from typing import Any

import typer
from pydantic import ValidationError

from common import runtime
from common.logging import setup_logging
from rep.settings import RepSettings

from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, bad_input, fail, name_flags
from .settings_flags import with_settings_flags

# The help's panels besides "Options" (and the mixins' TLS and serving limits).
PANELS = {
    "Cell": ("cell_id", "rep_id", "zone", "memory_mb", "disk_mb", "memory_reserve_mb", "disk_reserve_mb",
             "containers", "stacks", "placement_tags", "optional_placement_tags", "volume_drivers", "labels"),
    "Process executor": ("isolation", "app_uid_range", "pids_limit", "cgroup_parent", "instances_dir",
                         "cgroup_fs", "log_cap_mb", "disk_check_interval", "stop_grace", "cache_dir",
                         "cache_mb"),
    "Container executor": ("container_subnet", "container_egress", "insecure_registries", "registry_ca",
                           "cni_path", "container_init"),
    # Alone: its --no- twin widens the names of every flag in its panel.
    "Process executor, --isolation none": ("memory_limit",),
    "Simulation (--executor sim)": ("cells", "zones", "sim_start_delay", "sim_crash_rate"),
}


@app.command(cls=OneLineErrorsCommand)
@with_settings_flags(RepSettings, role="rep", panels=PANELS)
def rep(
    settings_given: dict[str, Any] | None = None,  # a flag per setting in its place (settings_flags.py)
    sim: bool = typer.Option(False, "--sim", help="Shorthand for --executor sim."),
    check_config: bool = typer.Option(
        False, "--check-config", help="Validate the settings and exit: 0, or 2 and the setting at fault."
    ),
) -> None:
    """Run a rep: advertise the cell, take work from auctions, run it, report to the BBS."""
    from common.tls import CertError
    from rep.main import ConfigError, serve

    given = dict(settings_given or {})
    if sim:
        if given.get("executor", "sim") != "sim":
            fail(f"--sim and --executor {given['executor']}: give one", USAGE_ERROR)
        given["executor"] = "sim"
    try:
        settings = RepSettings(**given)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()]
        fail("; ".join(name_flags(problems)), USAGE_ERROR)
    if check_config:
        from rep.config_check import config_problem

        problem = config_problem(settings)
        if problem is not None:
            bad_input(problem)
        typer.echo("config ok")
        raise typer.Exit(0)
    setup_logging("rep", settings.log_level, settings.log_format)
    try:
        status = runtime.run(serve(settings))
    except (ConfigError, CertError) as exc:  # CertError: TLS files, or plain HTTP off loopback
        bad_input(str(exc))
    raise typer.Exit(status)
