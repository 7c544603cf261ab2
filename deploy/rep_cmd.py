"""`vendue rep`: run a cell agent (or, with --sim --cells N, N simulated cells in one process).

Settings come from `VENDUE_*` environment variables (rep/settings.py); flags given here override them.
With `--tls-cert/--tls-key/--tls-ca` it serves HTTPS and authorizes every request (docs/security.md);
without them only on a loopback address, or anywhere with --insecure (plain HTTP, authorization off, a
warning).
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError

from common import runtime
from common.logging import setup_logging

from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, bad_input, fail, name_flags
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


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"expected k=v, got {pair!r}", param_hint="--label")
        labels[name] = value
    return labels


@app.command(cls=OneLineErrorsCommand)
def rep(
    bbs_url: str | None = typer.Option(
        None,
        "--bbs-url",
        help="The BBS URL, or several comma-separated replicas to fail over between (env VENDUE_BBS_URL; "
        "every flag has a VENDUE_* twin).",
    ),
    cell_id: str | None = typer.Option(None, "--cell-id", help="Cell id (default: from the hostname)."),
    rep_id: str | None = typer.Option(
        None, "--rep-id", help="The process's name (NATS subjects; default: the cell id, or the sim prefix)."
    ),
    zone: str | None = typer.Option(None, "--zone", help="Availability zone (default z0)."),
    zones: int | None = typer.Option(None, "--zones", min=1, help="Sim: spread the cells over z0..z{Z-1}."),
    listen: str | None = typer.Option(None, "--listen", help="Address to bind (default 127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", min=0, max=65535, help="Port (default 1800; 0 = free)."),
    advertise_host: str | None = typer.Option(None, "--advertise-host", help="Host in rep and app URLs."),
    memory_mb: int | None = typer.Option(
        None,
        "--memory-mb",
        min=1,
        help="Memory to offer, MB (default: MemTotal of /proc/meminfo less --memory-reserve-mb; sim 64 GB).",
    ),
    disk_mb: int | None = typer.Option(
        None,
        "--disk-mb",
        min=1,
        help="Disk to offer, MB (default: the size of the filesystem holding the instance directories less "
        "--disk-reserve-mb; sim 256 GB).",
    ),
    memory_reserve_mb: int | None = typer.Option(
        None, "--memory-reserve-mb", min=0, help="Memory kept back from the default --memory-mb, MB (0)."
    ),
    disk_reserve_mb: int | None = typer.Option(
        None, "--disk-reserve-mb", min=0, help="Disk kept back from the default --disk-mb, MB (1024)."
    ),
    containers: int | None = typer.Option(None, "--containers", min=1, help="Container slots (default 250)."),
    stack: list[str] = typer.Option([], "--stack", help="Supported stack, repeatable (default cflinuxfs4)."),
    tag: list[str] = typer.Option([], "--tag", help="Placement tag of this cell, repeatable."),
    optional_tag: list[str] = typer.Option([], "--optional-tag", help="Optional placement tag, repeatable."),
    volume_driver: list[str] = typer.Option([], "--volume-driver", help="Volume driver, repeatable."),
    label: list[str] = typer.Option([], "--label", help="Cell label k=v, repeatable."),
    executor: str | None = typer.Option(None, "--executor", help="process (default) or sim."),
    sim: bool = typer.Option(False, "--sim", help="Shorthand for --executor sim."),
    cells: int | None = typer.Option(None, "--cells", min=1, help="Sim: simulated cells in this process."),
    sim_start_delay: float | None = typer.Option(
        None, "--sim-start-delay", min=0, help="Sim start, s (0.05)."
    ),
    report_linger: float | None = typer.Option(
        None, "--report-linger", min=0, max=5, help="Lifecycle reports gather this long, s (0.1)."
    ),
    sim_crash_rate: float | None = typer.Option(
        None, "--sim-crash-rate", min=0, help="Sim crashes per s (0)."
    ),
    presence_ttl: float | None = typer.Option(
        None, "--presence-ttl", help="Presence TTL, s (10); beat TTL/3."
    ),
    evacuation_timeout: float | None = typer.Option(
        None, "--evacuation-timeout", help="Drain limit, s (600)."
    ),
    stop_grace: float | None = typer.Option(None, "--stop-grace", help="SIGTERM->SIGKILL grace, s (10)."),
    isolation: str | None = typer.Option(
        None,
        "--isolation",
        help="Process executor: cgroups (default; needs root: each instance under its own uid, in its own "
        "cgroup) or none (apps run as the rep's own user, unisolated) [VENDUE_ISOLATION].",
    ),
    app_uid_range: str | None = typer.Option(
        None, "--app-uid-range", help="Uids (gid = uid) given to instances, LO-HI (100000-165535)."
    ),
    pids_limit: int | None = typer.Option(
        None, "--pids-limit", min=1, help="Processes and threads per instance (1024)."
    ),
    cgroup_parent: str | None = typer.Option(
        None,
        "--cgroup-parent",
        help="Put the instances' cgroups under this one, absolute from each hierarchy's root (default: "
        "the rep's own cgroup + /vendue).",
    ),
    instances_dir: Path | None = typer.Option(
        None,
        "--instances-dir",
        help="Where instance directories live. Default with cgroups: /var/lib/vendue/instances/<key>/<cell>/ "
        "(<key> from the data dir), reachable by the apps' users whatever the data dir's parents; with "
        "--isolation none: <data-dir>/<cell>/containers/.",
    ),
    cgroup_fs: Path | None = typer.Option(None, "--cgroup-fs", hidden=True),  # tests: another cgroup mount
    memory_limit: bool | None = typer.Option(
        None,
        "--memory-limit/--no-memory-limit",
        help="--isolation none: cap each child's RLIMIT_DATA at its memory_mb.",
    ),
    log_cap_mb: int | None = typer.Option(
        None,
        "--log-cap-mb",
        min=1,
        help="An instance's output.log and output.log.1 together, MB (10); the older half rotates away.",
    ),
    disk_check_interval: float | None = typer.Option(
        None,
        "--disk-check-interval",
        min=0.001,
        help="Measure every instance's directory against its disk_mb this often, s (2); also on exit.",
    ),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Container directories (default .vendue)."),
    ready_file: Path | None = typer.Option(None, "--ready-file", help="Write {url, pid} here once serving."),
    log_level: str | None = typer.Option(None, "--log-level", help="debug, info, warning, error."),
    log_format: str | None = LOG_FORMAT_FLAG,
    transport: str | None = typer.Option(
        None, "--transport", help="http or nats: also serve state and work over NATS (VENDUE_TRANSPORT)."
    ),
    nats_url: str | None = typer.Option(
        None,
        "--nats-url",
        help="NATS server(s), credentials allowed (VENDUE_NATS_URL; token: VENDUE_NATS_TOKEN).",
    ),
    tls_cert: Path | None = tls_cert_flag("rep"),
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
    """Run a rep: advertise the cell, take work from auctions, run it, report to the BBS."""
    from common.tls import CertError
    from rep.main import ConfigError, serve
    from rep.settings import RepSettings

    if sim:
        if executor not in (None, "sim"):
            fail(f"--sim and --executor {executor}: give one", USAGE_ERROR)
        executor = "sim"
    given = {
        "bbs_url": bbs_url,
        "cell_id": cell_id,
        "rep_id": rep_id,
        "zone": zone,
        "zones": zones,
        "listen": listen,
        "port": port,
        "advertise_host": advertise_host,
        "memory_mb": memory_mb,
        "disk_mb": disk_mb,
        "memory_reserve_mb": memory_reserve_mb,
        "disk_reserve_mb": disk_reserve_mb,
        "containers": containers,
        "stacks": stack or None,
        "placement_tags": tag or None,
        "optional_placement_tags": optional_tag or None,
        "volume_drivers": volume_driver or None,
        "labels": _labels(label) or None,
        "executor": executor,
        "cells": cells,
        "sim_start_delay": sim_start_delay,
        "report_linger": report_linger,
        "sim_crash_rate": sim_crash_rate,
        "presence_ttl": presence_ttl,
        "evacuation_timeout": evacuation_timeout,
        "stop_grace": stop_grace,
        "isolation": isolation,
        "app_uid_range": app_uid_range,
        "pids_limit": pids_limit,
        "cgroup_parent": cgroup_parent,
        "instances_dir": instances_dir,
        "cgroup_fs": cgroup_fs,
        "memory_limit": memory_limit,
        "log_cap_mb": log_cap_mb,
        "disk_check_interval": disk_check_interval,
        "data_dir": data_dir,
        "ready_file": ready_file,
        "log_level": log_level,
        "log_format": log_format,
        "transport": transport,
        "nats_url": nats_url,
        **tls_settings(tls_cert, tls_key, tls_ca, insecure),
        **limit_settings(max_body_bytes, max_bulk_body_bytes, request_timeout, max_concurrent_requests),
    }
    try:
        settings = RepSettings(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}" for error in exc.errors()]
        # The settings set by a flag of another name.
        flags = {"stacks": "stack", "placement_tags": "tag", "optional_placement_tags": "optional_tag",
                 "volume_drivers": "volume_driver", "labels": "label"}
        fail("; ".join(name_flags(problems, flags)), USAGE_ERROR)
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
