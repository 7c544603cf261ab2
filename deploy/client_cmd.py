"""The client commands: `vendue push|scale|delete|apps|instances|cells [remove]|task run|tasks`
(`cells cordon|uncordon|drain`: deploy/cells_cmd.py; `events`: deploy/events_cmd.py).

They talk to a BBS found, in order, through `--bbs URL[,URL...]` (alias `--bbs-url`; several BBS
replicas: each request goes to one that answers), `VENDUE_BBS_URL`, the
running local cluster in `--data-dir` (its cluster.json, written by `vendue up`), or the BBS default
http://127.0.0.1:8889. Listings print tables that fit the terminal (deploy/listing.py), or with `-o json|yaml`
(`--json`) the wire names of common/models/, times in RFC 3339 UTC (deploy/wire_json.py).

Who they are to the cluster (docs/security.md), in order: `--tls-cert/--tls-key/--tls-ca` (or
`VENDUE_TLS_CERT/KEY/CA`), else the admin certificate of the running local cluster (cluster.json `tls`);
and a bearer token from `--token` (`VENDUE_TOKEN`), sent as `Authorization: Bearer ...` — with a token,
the CA alone (`--tls-ca`, or the local cluster's) is enough. A 401 or 403 is one `error:` line, exit 1.

Exit status: 0 done; 1 the BBS is unreachable, the app/task does not exist, or a task failed; 2 bad
input — ONE line on stderr naming the flag and the field it sets (`error: -m/--memory (memory_mb): Input
should be ...`), and nothing is written: the request is validated locally with the same models the BBS
uses, and a 422 from the BBS is reported the same way.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer

from .cli import app
from .cli_style import FAILURE, USAGE_ERROR, OneLineErrorsCommand, OneLineErrorsGroup, fail, name_flags
from .cluster_file import read_cluster_file
from .image_args import CredentialsFileOption, ImageOption, image_field, shown_image
from .terminal_text import echo, markup, safe_console

# The models, the BBS client (httpx), pydantic and rich are imported where a command runs, not here:
# `vendue apps --help` and argument parsing never need them, and they are most of a client command's
# start-up time (deploy/startup_test.py).
if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console
    from rich.table import Table

    from common.models import ActualLRP, CellPresence, DesiredLRPCreate, DesiredLRPUpdate, Task, TaskCreate
    from common.tls import CertError

    from .bbs_client import BBSClient, ClientAuth, InvalidRequest

task_app = typer.Typer(help="Run and inspect one-off tasks.", no_args_is_help=True, cls=OneLineErrorsGroup)
app.add_typer(task_app, name="task")

BbsUrl = Annotated[str | None, typer.Option(
    "--bbs", "--bbs-url", envvar="VENDUE_BBS_URL", show_envvar=True,
    help="BBS URL, or several comma-separated (default: the running local cluster in --data-dir, else "
    "http://127.0.0.1:8889).")]
DataDir = Annotated[Path, typer.Option(
    "--data-dir", envvar="VENDUE_DATA_DIR", help="Where `vendue up` keeps the local cluster.")]
OUTPUT_FORMATS = ("json", "yaml", "wide")


def _json_given(ctx: typer.Context, value: bool) -> bool:
    # `-o json|yaml` may have been read first (click reads options in command-line order): it set this.
    return bool(value or ctx.params.get("as_json"))


def _output_given(ctx: typer.Context, value: str | None) -> str | None:
    if value is not None and value not in OUTPUT_FORMATS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    if value in ("json", "yaml"):
        ctx.params["as_json"] = True  # the commands test as_json: `-o json` is `--json`, yaml its twin
    return value


AsJson = Annotated[bool, typer.Option(
    "--json", help="Print JSON (the API's wire names) instead of a table (same as -o json).",
    callback=_json_given)]
# Added by bbs_command to every command that takes --json: one definition of -o for every listing.
Output = Annotated[str | None, typer.Option(
    "-o", "--output", metavar="FORMAT",
    help="json or yaml (the API's wire names, times in RFC 3339 UTC), or wide (every column, whole).",
    callback=_output_given)]
TlsCert = Annotated[Path | None, typer.Option(
    "--tls-cert", envvar="VENDUE_TLS_CERT", show_envvar=True,
    help="Client certificate (with --tls-key, --tls-ca; default: the local cluster's admin.pem).")]
TlsKey = Annotated[Path | None, typer.Option(
    "--tls-key", envvar="VENDUE_TLS_KEY", show_envvar=True, help="The client certificate's key.")]
TlsCa = Annotated[Path | None, typer.Option(
    "--tls-ca", envvar="VENDUE_TLS_CA", show_envvar=True,
    help="The cluster CA (alone: with --token, no client certificate).")]
OnCellLossOption = Annotated[str | None, typer.Option(
    "--on-cell-loss",
    help="When the app's cell is lost: reschedule (Diego's, the default: replace its instances at once) or "
    "keep-replicas (wait out the BBS's --cell-loss-grace and check, then move only single-instance apps).")]
CodePath = Annotated[Path | None, typer.Option(
    "--path", help="Pack this directory (less what its .vendueignore names), upload it unless the blob store "
    "holds it, and run COMMAND in it (docs/artifacts.md).")]
ArtifactOption = Annotated[list[str] | None, typer.Option(
    "--artifact", help="Also place sha256:HEX[:DEST] (from the blob store) or URL#sha256=HEX[:DEST] "
    "(repeatable).")]
Token = Annotated[str | None, typer.Option(
    "--token", envvar="VENDUE_TOKEN", show_envvar=True,
    help="A bearer token (vendue tokens create) instead of a client certificate; prefer VENDUE_TOKEN: a "
    "flag's value is visible to every user of the machine (ps).")]


@dataclass(frozen=True, slots=True)
class Connection:
    """Where the BBS is and who we are to it, as the command line (or the environment) said. Every field is
    an option of every BBS command (`bbs_command`)."""

    bbs: BbsUrl = None
    data_dir: DataDir = Path(".vendue")
    tls_cert: TlsCert = None
    tls_key: TlsKey = None
    tls_ca: TlsCa = None
    token: Token = None


def bbs_command(command: Callable[..., None]) -> Callable[..., None]:
    """`command`, which takes `connection: Connection = Connection()`, as typer is to see it: with the
    Connection's options (--bbs, --data-dir, --tls-*, --token) in that parameter's place, gathered back into
    one Connection when it runs. One definition of the options for every command that talks to the BBS."""
    signature = inspect.signature(command, eval_str=True)
    place = signature.parameters["connection"]
    hints = get_type_hints(Connection, include_extras=True)
    options = [inspect.Parameter(f.name, place.kind, annotation=hints[f.name], default=f.default)
               for f in fields(Connection)]
    parameters = list(signature.parameters.values())
    at = parameters.index(place)
    takes_output = "as_json" in signature.parameters and "output" not in signature.parameters
    if takes_output:
        after = parameters.index(signature.parameters["as_json"]) + 1
        parameters.insert(after, inspect.Parameter("output", place.kind, annotation=Output, default=None))

    @functools.wraps(command)
    def with_connection(**given: Any) -> None:
        connection = Connection(**{option.name: given.pop(option.name) for option in options})
        if takes_output:
            given.pop("output", None)  # read where output is printed (output_format)
        command(connection=connection, **given)

    with_connection.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*parameters[:at], *options, *parameters[at + 1:]])
    return with_connection


# --- plumbing -------------------------------------------------------------------------------------


def resolve_bbs_url(bbs: str | None, data_dir: Path, local: dict[str, Any] | None) -> tuple[str, str]:
    """The BBS URL to use (several comma-separated: replicas to fail over between) and where it came
    from (for the "unreachable" message). `local`: the running local cluster's cluster.json, if any."""
    from common.failover import URLListError, split_urls

    from .bbs_client import DEFAULT_BBS_URL

    if bbs:
        try:
            return ",".join(split_urls(bbs)), "--bbs/VENDUE_BBS_URL"
        except URLListError as exc:
            fail(f"--bbs: {exc}", USAGE_ERROR)
    if local is not None and (local.get("bbs_urls") or local.get("bbs_url")):
        urls = local.get("bbs_urls") or [local["bbs_url"]]  # an HA cluster lists every BBS replica
        return ",".join(str(url) for url in urls), f"the local cluster in {data_dir}"
    return DEFAULT_BBS_URL, f"the default (no --bbs, no VENDUE_BBS_URL, no running cluster in {data_dir})"


def _as_flag(exc: CertError) -> str:
    """common.tls names the setting (`tls_cert: ...`); the CLI names the flag (`--tls-cert: ...`)."""
    setting, sep, why = str(exc).partition(": ")
    return f"--{setting.replace('_', '-')}: {why}" if sep and setting.startswith("tls_") else str(exc)


def resolve_auth(given: Connection, local: dict[str, Any] | None) -> ClientAuth:
    """How to prove who we are: the `--tls-*` flags (all three; or `--tls-ca` alone, for a token), else
    the running local cluster's admin certificate (`local`: its cluster.json `tls`; only its CA when a
    token is given), else nothing (an insecure cluster). Bad flags: one line, exit 2."""
    from .bbs_client import ClientAuth

    token = given.token or None
    if given.tls_cert is not None or given.tls_key is not None:
        from common.tls import CertError, TLSFiles  # here: a client of an insecure cluster does without

        try:
            return ClientAuth(
                tls=TLSFiles.from_settings(given.tls_cert, given.tls_key, given.tls_ca), token=token
            )
        except CertError as exc:
            fail(_as_flag(exc), USAGE_ERROR)
    if given.tls_ca is not None:
        if not given.tls_ca.is_file():
            fail(f"--tls-ca: no such file {given.tls_ca}", USAGE_ERROR)
        return ClientAuth(ca=given.tls_ca, token=token)
    tls = local.get("tls") if local is not None else None
    if isinstance(tls, dict):
        from common.tls import TLSFiles

        files = TLSFiles(Path(tls["cert"]), Path(tls["key"]), Path(tls["ca"]))
        return ClientAuth(ca=files.ca, token=token) if token else ClientAuth(tls=files)
    return ClientAuth(token=token)


@contextlib.contextmanager
def connect(connection: Connection) -> Iterator[BBSClient]:
    """A BBS client; every BBS failure becomes one `error:` line and the right exit status."""
    from .bbs_client import BBSClient, BBSError, BBSUnreachable, InvalidRequest

    local = read_cluster_file(connection.data_dir)  # read once: it may give the URL and the certificate
    url, source = resolve_bbs_url(connection.bbs, connection.data_dir, local)
    try:
        client = BBSClient(url, auth=resolve_auth(connection, local))
    except ValueError as exc:  # common.tls.CertError is one; the module is imported only to use TLS
        from common.tls import CertError

        if not isinstance(exc, CertError):
            raise
        fail(_as_flag(exc), USAGE_ERROR)
    try:
        yield client
    except InvalidRequest as exc:
        fail(invalid_input(exc), USAGE_ERROR)
    except BBSUnreachable as exc:
        hint = ("TLS: the cluster's CA and a certificate it signed are --tls-ca, --tls-cert, --tls-key"
                if "SSL" in str(exc) else "start a cluster with `vendue up`")
        fail(f"{exc} (BBS from {source}; {hint})")
    except BBSError as exc:
        fail(str(exc))
    finally:
        client.close()


# The wire fields the client commands set through a parameter of another name (the others: the same name).
WIRE_FIELD_PARAMS = {
    "process_guid": "name", "task_guid": "name", "placement_tags": "tags", "health_check.path": "health_path",
    "health_check": "health", "artifacts": "artifact", "health_check.interval_s": "health_interval",
    "health_check.invocation_timeout_s": "health_timeout",
    "health_check.failure_threshold": "health_threshold", "health_check.timeout_s": "health_start_timeout",
}


def invalid_input(exc: InvalidRequest) -> str:
    """A 422 (or the same check done locally) in the CLI's words: each field with the flag that set it."""
    return "; ".join(name_flags(exc.errors, WIRE_FIELD_PARAMS))


def validated(model: type[BaseModel], **fields: Any) -> Any:
    """Build a request body locally, so bad input never reaches (or changes) the BBS."""
    from pydantic import ValidationError

    from .bbs_client import invalid_from_validation_error

    try:
        return model(**fields)
    except ValidationError as exc:
        fail(invalid_input(invalid_from_validation_error(exc)), USAGE_ERROR)


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"--env: expected NAME=VALUE, got {pair!r}", USAGE_ERROR)
        env[name] = value
    return env


def output_format() -> str | None:
    """The running command's `-o` (json, yaml, wide), None without one."""
    import contextlib
    import importlib

    # As in cli_style: the context is on recent typer's vendored click's stack, or on click's.
    for module in ("typer._click.globals", "click.globals"):
        with contextlib.suppress(ImportError):
            ctx = importlib.import_module(module).get_current_context(silent=True)
            if ctx is not None:
                value = ctx.params.get("output")
                return value if isinstance(value, str) else None
    return None


def console(listing: bool = True) -> Console:
    """stdout as rich sees it. A listing fits the terminal (deploy/listing.py), or the COLUMNS given when
    piped; piped without COLUMNS, or with `-o wide`, it is never wrapped nor shortened (one row per line,
    whole cells, for grep and scripts). Other output gets 120 columns at least when piped."""
    import os

    out = safe_console()
    if listing and output_format() == "wide":
        return safe_console(width=1_000_000)
    if out.is_terminal or (listing and os.environ.get("COLUMNS", "").isdigit()):
        return out
    return safe_console(width=1_000_000) if listing else safe_console(width=max(out.width, 120))


def listing_table(title: str) -> Table:
    from .listing import ListingTable

    return ListingTable(title=title, title_justify="left")


def print_json(value: Any) -> None:
    """`value` as JSON, or YAML with `-o yaml`; every time in it written one way (deploy/wire_json.py)."""
    from .wire_json import wire_times

    value = wire_times(value)
    if output_format() == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(value, sort_keys=False, allow_unicode=True))
        return
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def report_done(as_json: bool, message: str, **record: Any) -> None:
    """What a command that changes one thing did: `message` for people, or `record` as JSON."""
    if as_json:
        print_json(record)
    else:
        echo(message)


def dump(models: Sequence[BaseModel]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in models]


def age(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return ""
    now = now or datetime.now(UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    return f"{seconds // 3600}h ago"


# --- apps -----------------------------------------------------------------------------------------


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def push(
    name: Annotated[str, typer.Argument(help="The app's process guid.", show_default=False)],
    command: Annotated[
        list[str] | None, typer.Argument(metavar="-- COMMAND...", help="What each instance runs (argv).")
    ] = None,
    instances: Annotated[int, typer.Option("--instances", "-i", help="How many instances.")] = 1,
    memory_mb: Annotated[int, typer.Option("--memory", "-m", help="Memory per instance, MB.")] = 256,
    disk_mb: Annotated[int, typer.Option("--disk", "-d", help="Disk per instance, MB.")] = 1024,
    stack: Annotated[str | None, typer.Option("--stack", help="Required stack (rootfs).")] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="Placement tag (repeatable).")] = None,
    strategy: Annotated[str | None, typer.Option(
        "--strategy", help="How a change of an existing app rolls out: rolling (the default) or canary (one "
        "new instance, then a pause until `vendue rollout resume`); or the app's placement strategy "
        "(diego, binpack, ...).")] = None,
    max_in_flight: Annotated[str, typer.Option(
        "--max-in-flight", help="A change rolls out this many instances at once: N or N% of them.")] = "1",
    rollback: Annotated[bool, typer.Option(
        "--rollback/--no-rollback", help="A new version that fails rolls back (else the rollout pauses).")
    ] = True,
    ports: Annotated[
        list[int] | None, typer.Option("--port", help="Container port (repeatable; default 8080).")
    ] = None,
    health: Annotated[
        str | None, typer.Option("--health", help="Health check: port, process or http.")
    ] = None,
    health_path: Annotated[
        str | None, typer.Option("--health-path", help="Path of the http health check.")
    ] = None,
    health_interval: Annotated[
        float | None, typer.Option("--health-interval", help="Seconds between checks once running (30).")
    ] = None,
    health_timeout: Annotated[
        float | None, typer.Option("--health-timeout", help="Seconds one check may take (1).")
    ] = None,
    health_threshold: Annotated[
        int | None, typer.Option("--health-threshold", help="Failed checks in a row that crash it (1).")
    ] = None,
    health_start_timeout: Annotated[
        float | None, typer.Option("--health-start-timeout", help="Seconds to pass the first check (60).")
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE (repeatable).")] = None,
    domain: Annotated[str | None, typer.Option("--domain", help="Domain the app belongs to.")] = None,
    on_cell_loss: OnCellLossOption = None,
    no_exec: Annotated[bool, typer.Option(
        "--no-exec", help="Refuse `vendue exec` into its instances (`vendue exec-enable` allows it again).")
    ] = False,
    path: CodePath = None,
    artifact: ArtifactOption = None,
    image: ImageOption = None,
    registry_credentials_file: CredentialsFileOption = None,
    wait: Annotated[bool | None, typer.Option(
        "--wait/--no-wait", help="A new app: wait until every instance runs (default: no). An existing "
        "app: wait until its rollout ends, exit 1 if it failed (default: yes).", show_default=False)] = None,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", help="Give up waiting after this many seconds (default: 60 for a new app, none for "
        "a rollout, which ends by itself).")] = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Desire an app: N instances of COMMAND, placed by auction. `$PORT` is set in each instance."""
    from common.models import DesiredLRPCreate

    from .bbs_client import Conflict
    from .push_update import parse_max_in_flight, push_existing, rollout_strategy
    from .ship import code_artifacts

    if not command and image is None:
        fail("command: give the command to run after `--`, e.g. `vendue push web -- python3 app.py` (or "
             "--image REF to run an image's entrypoint)", USAGE_ERROR)
    try:
        in_flight = parse_max_in_flight(max_in_flight)
    except ValueError as exc:
        fail(f"--max-in-flight: {exc}", USAGE_ERROR)
    rolls = strategy if strategy in ("rolling", "canary") else "rolling"
    strategy = None if strategy in ("rolling", "canary") else strategy
    fields: dict[str, Any] = {"process_guid": name, "instances": instances, "memory_mb": memory_mb,
                              "disk_mb": disk_mb, "command": list(command or [])}
    if (image_given := image_field(image, registry_credentials_file)) is not None:
        fields["image"] = image_given
    optional = {"stack": stack, "strategy": strategy, "domain": domain, "on_cell_loss": on_cell_loss}
    fields.update({k: v for k, v in optional.items() if v is not None})
    if no_exec:
        fields["exec_enabled"] = False
    if tags:
        fields["placement_tags"] = list(tags)
    if ports:
        fields["ports"] = list(ports)
    if env:
        fields["env"] = parse_env(env)
    check = {"path": health_path, "interval_s": health_interval, "invocation_timeout_s": health_timeout,
             "failure_threshold": health_threshold, "timeout_s": health_start_timeout}
    if health is not None or any(v is not None for v in check.values()):
        given = {k: v for k, v in check.items() if v is not None}
        fields["health_check"] = {"type": health or "port"} | given
    with code_artifacts(path, artifact) as code, connect(connection) as client:
        if code.artifacts:
            fields["artifacts"] = code.artifacts
        lrp: DesiredLRPCreate = validated(DesiredLRPCreate, **fields)
        code.ship(client)
        try:
            desired = client.desire_lrp(lrp)
        except Conflict:  # an app that exists is changed: a rolling update (deploy/push_update.py)
            push_existing(client, lrp, rollout_strategy(in_flight, rollback, rolls), wait=wait is not False,
                          timeout=timeout, as_json=as_json)
            return
        if wait:
            _wait_running(client, name, desired.instances, 60.0 if timeout is None else timeout)
    if as_json:
        print_json(desired.model_dump(mode="json"))
        return
    what = " ".join(desired.command)
    if desired.image is not None:
        what = f"{shown_image(desired.image)}: {what}"
    echo(f"pushed {name}: {desired.instances} instance(s) of {what}"
         + ("" if wait else f"; see them with `vendue instances {name}`"))


def _wait_running(client: BBSClient, name: str, instances: int, timeout: float) -> None:
    from common.models import ActualState

    deadline = time.monotonic() + timeout
    while True:
        actuals = client.actual_lrps(process_guid=name)
        running = {a.index for a in actuals if a.state == ActualState.RUNNING}
        if len(running & set(range(instances))) == instances:
            return
        if time.monotonic() >= deadline:
            states = Counter(str(a.state) for a in actuals)
            errors = sorted({a.placement_error for a in actuals if a.placement_error})
            fail(f"expected {instances} running instance(s) of {name} within {timeout:g}s; saw "
                 f"{dict(states)}" + (f", placement errors {errors}" if errors else ""))
        time.sleep(0.2)


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def scale(
    name: Annotated[str, typer.Argument(help="The app's process guid.", show_default=False)],
    instances: Annotated[int | None, typer.Option("--instances", "-i",
                                                  help="The new number of instances.")] = None,
    on_cell_loss: OnCellLossOption = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Change how many instances of an app are desired, and/or what happens to them when their cell is
    lost."""
    from common.models import DesiredLRPUpdate

    from .bbs_client import NotFound

    if instances is None and on_cell_loss is None:
        fail("--instances: give the new number of instances (-i N), or --on-cell-loss", USAGE_ERROR)
    update: DesiredLRPUpdate = validated(DesiredLRPUpdate, instances=instances, on_cell_loss=on_cell_loss)
    with connect(connection) as client:
        try:
            desired = client.update_desired_lrp(name, update)
        except NotFound:
            fail(f"no app named {name!r}")
    if as_json:
        print_json(desired.model_dump(mode="json"))
        return
    echo(f"scaled {name} to {desired.instances} instance(s), on cell loss: {desired.on_cell_loss}")


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def delete(
    name: Annotated[str, typer.Argument(help="The app's process guid.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Remove an app: its instances are stopped and forgotten."""
    from .bbs_client import NotFound

    with connect(connection) as client:
        try:
            client.remove_desired_lrp(name)
        except NotFound:
            fail(f"no app named {name!r}")
    report_done(as_json, f"deleted {name}", process_guid=name, deleted=True)


def app_summaries(desired: Sequence[Any], actuals: Sequence[ActualLRP]) -> list[dict[str, Any]]:
    """Desired vs running per app. An index counts as running once any of its actuals runs (during an
    evacuation the old and the new instance both run; the app still has one running instance there)."""
    from common.models import ActualState, Presence

    by_app: dict[str, list[ActualLRP]] = defaultdict(list)
    for actual in actuals:
        by_app[actual.process_guid].append(actual)
    rows = []
    for lrp in desired:
        mine = by_app.get(lrp.process_guid, [])
        wanted = set(range(lrp.instances))
        running = {a.index for a in mine if a.state == ActualState.RUNNING} & wanted
        starting = {a.index for a in mine if a.state in (ActualState.UNCLAIMED, ActualState.CLAIMED)
                    and a.presence == Presence.ORDINARY} & wanted - running
        crashed = {a.index for a in mine if a.state == ActualState.CRASHED} & wanted - running
        rows.append({
            "process_guid": lrp.process_guid,
            "domain": lrp.domain,
            "instances": lrp.instances,
            "running": len(running),
            "starting": len(starting),
            "crashed": len(crashed),
            "memory_mb": lrp.memory_mb,
            "disk_mb": lrp.disk_mb,
            "strategy": lrp.strategy,
            "placement_errors": sorted({a.placement_error for a in mine if a.placement_error}),
        })
    return rows


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def apps(
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Every app: desired vs running instances."""
    with connect(connection) as client:
        rows = app_summaries(client.desired_lrps(), client.actual_lrps())
    if as_json:
        print_json(rows)
        return
    table = listing_table(f"{len(rows)} app(s)")
    for column in ("APP", "RUNNING", "STARTING", "CRASHED", "MEMORY", "DISK", "STRATEGY", "PLACEMENT ERROR"):
        table.add_column(column, no_wrap=column != "PLACEMENT ERROR")
    for row in rows:
        ok = row["running"] == row["instances"]
        table.add_row(
            markup(row["process_guid"]),
            f"[{'green' if ok else 'yellow'}]{row['running']}/{row['instances']}[/]",
            str(row["starting"]), str(row["crashed"]),
            f"{row['memory_mb']} MB", f"{row['disk_mb']} MB", markup(row["strategy"] or "(cluster)"),
            markup("; ".join(row["placement_errors"])),
        )
    console().print(table)


def short_bytes(n: int) -> str:
    """Bytes as `cf app` shows them: 201M, 1.5G, 12K (binary units)."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            value = n / size
            text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
            return (text.removesuffix(".0")) + unit
    return f"{n}B"


def usage_cells(usage: dict[str, Any] | None) -> tuple[str, str, str]:
    """CPU %, MEM used/limit, DISK used/limit of one instance ("-" where nothing was measured)."""
    if not usage:
        return "-", "-", "-"
    cpu = usage.get("cpu")
    return (
        "-" if cpu is None else f"{cpu * 100:.1f}%",
        f"{short_bytes(usage['memory_bytes'])}/{short_bytes(usage['memory_limit_bytes'])}",
        f"{short_bytes(usage['disk_bytes'])}/{short_bytes(usage['disk_limit_bytes'])}",
    )


INSTANCE_COLUMNS = ("INDEX", "VER", "STATE", "PRESENCE", "CELL", "ZONE", "ADDRESS", "SINCE", "CRASHES", "CPU",
                    "MEM", "DISK", "ERROR")
# Never cut: what names the instance and its figures; the others are cut widest first to fit the terminal,
# and where that is not enough these are left out, in this order (--json and a wide terminal have them all).
INSTANCE_KEPT = ("INDEX", "STATE", "CELL", "CPU", "MEM", "DISK")
INSTANCE_DROPPED = ("PRESENCE", "ZONE", "VER", "ADDRESS", "CRASHES", "SINCE")
INSTANCE_NUMBERS = ("INDEX", "VER", "CPU")  # right-aligned


def instances_table(actuals: Sequence[ActualLRP], title: str,
                    usage: dict[str, dict[str, Any]] | None = None) -> Table:
    """`usage`: GET /v1/usage's items by instance guid."""
    from common.models import ActualState, Presence

    from .listing import ListingTable

    colours = {ActualState.RUNNING: "green", ActualState.CRASHED: "red"}
    now = datetime.now(UTC)
    table = ListingTable(title=title, title_justify="left", keep=INSTANCE_KEPT, drop=INSTANCE_DROPPED)
    for header in INSTANCE_COLUMNS:
        table.add_column(header, no_wrap=True, justify="right" if header in INSTANCE_NUMBERS else "left")
    for a in sorted(actuals, key=lambda a: (a.index, a.presence != Presence.ORDINARY)):
        used = (usage or {}).get(a.instance_guid) if a.instance_guid else None
        table.add_row(
            str(a.index), str(a.version), f"[{colours.get(a.state, 'yellow')}]{markup(a.state)}[/]",
            markup(a.presence),
            markup(a.cell_id or "-"), markup(a.zone or "-"), markup(a.address or "-"), age(a.since, now),
            str(a.crash_count), *usage_cells(used), markup(a.placement_error or a.crash_reason),
        )
    return table


def _usage_by_instance(client: BBSClient, name: str) -> dict[str, dict[str, Any]]:
    """The app's instances' figures; none from a BBS that does not serve them (or cannot now)."""
    from .bbs_client import BBSError

    try:
        items = client.usage(process_guid=name)["items"]
    except BBSError:
        return {}
    return {item["instance_guid"]: item for item in items}


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def instances(
    name: Annotated[str, typer.Argument(help="The app's process guid.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """An app's instances: index, version, state, cell, zone, address, since, crash count, CPU (% of one
    core), memory and disk used of their limits, placement error. With --json each carries `usage`: bytes,
    the CPU fraction and when it was sampled (null where nothing is measured: the sim executor)."""
    from common.models import Presence

    from .bbs_client import NotFound

    with connect(connection) as client:
        try:
            desired = client.desired_lrp(name)
        except NotFound:
            fail(f"no app named {name!r}")
        actuals = client.actual_lrps(process_guid=name)
        usage = _usage_by_instance(client, name)
    if as_json:
        ordered = sorted(actuals, key=lambda a: (a.index, a.presence != Presence.ORDINARY))
        print_json([{**a.model_dump(mode="json"), "usage": _raw_usage(usage.get(a.instance_guid))}
                    for a in ordered])
        return
    console().print(instances_table(actuals, f"{markup(name)}: {desired.instances} desired", usage))


def _raw_usage(item: dict[str, Any] | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {key: item[key] for key in ("cpu", "memory_bytes", "memory_limit_bytes", "disk_bytes",
                                       "disk_limit_bytes", "sampled_at")}


# --- cells ----------------------------------------------------------------------------------------


cells_app = typer.Typer(
    help="The cell states; `cordon`, `uncordon`, `drain`; `remove` forgets one that is gone.",
    invoke_without_command=True,
    no_args_is_help=False,
    cls=OneLineErrorsGroup,
)
app.add_typer(cells_app, name="cells")


@cells_app.callback()
@bbs_command
def cells(
    ctx: typer.Context,
    connection: Connection = Connection(),
    as_json: AsJson = False,
    expired: Annotated[
        bool, typer.Option("--all", help="Also cells whose presence expired (suspect).")
    ] = False,
) -> None:
    """The cell states, from the BBS (like `cfdot cell-states`; only MEMORY USED is asked of the reps):
    what each cell had left and held at its last heartbeat, and whether it is cordoned or draining (vendue
    cells cordon|drain) or evacuating (its rep stops). INSECURE: the rep runs without TLS and authorization
    (--insecure).
    ISOLATION: how its instances are isolated (cgroup-v1/cgroup-v2: own uid and cgroup each, then
    disk:ext4, a filesystem of disk_mb each, or disk:poll, disk use measured; none: as the rep's own user;
    sim: simulated). MEMORY USED: what its instances use now (the sum of their working sets, asked of the
    reps: docs/usage.md), against what is allocated to them; "-" where nothing is measured (sim)."""
    if ctx.invoked_subcommand is not None:
        return
    with connect(connection) as client:
        listed: list[CellPresence] = sorted(client.cells(expired=expired), key=lambda c: (c.zone, c.cell_id))
        used = _memory_used_by_cell(client)
    if as_json:
        print_json([{**cell.model_dump(mode="json"), "memory_used_bytes": used.get(cell.cell_id)}
                    for cell in listed])
        return
    table = listing_table(f"{len(listed)} cell(s)")
    for column in ("CELL", "ZONE", "STATE", "MEMORY FREE", "MEMORY USED", "DISK FREE", "CONTAINERS FREE",
                   "INSTANCES", "STARTING", "INSECURE", "ISOLATION", "REP"):
        table.add_column(column, no_wrap=True)
    for cell in listed:
        left, total = cell.available, cell.total
        table.add_row(
            markup(cell.cell_id), markup(cell.zone), cell_status(cell),
            f"{left.memory_mb if left else '?'} / {total.memory_mb} MB",
            memory_used(used.get(cell.cell_id), total.memory_mb - left.memory_mb if left else None),
            f"{left.disk_mb if left else '?'} / {total.disk_mb} MB",
            f"{left.containers if left else '?'} / {total.containers}",
            str(cell.instances), str(cell.starting),
            "[red]yes[/]" if cell.insecure else "no",
            "[red]none[/]" if cell.isolation == "none" else markup(cell.isolation or "?"),
            markup(cell.rep_url),
        )
    console().print(table)


def memory_used(used_bytes: int | None, allocated_mb: int | None) -> str:
    """A cell's used memory against what its instances were allocated: `201M of 512M alloc`."""
    if used_bytes is None:
        return "-"
    allocated = "?" if allocated_mb is None else short_bytes(allocated_mb * 1024 * 1024)
    return f"{short_bytes(used_bytes)} of {allocated} alloc"


def _memory_used_by_cell(client: BBSClient) -> dict[str, int]:
    """Every cell's instances' memory, summed (one request: the BBS asks each rep once)."""
    from .bbs_client import BBSError

    try:
        items = client.usage()["items"]
    except BBSError:
        return {}
    used: dict[str, int] = {}
    for item in items:
        used[item["cell_id"]] = used.get(item["cell_id"], 0) + int(item["memory_bytes"])
    return used


def cell_status(cell: CellPresence) -> str:
    """present or suspect (its presence expired), and what the operator or its rep made of it."""
    words = ["[green]present[/]" if cell.state == "present" else "[red]suspect[/]"]
    if cell.draining:
        words.append("[yellow]DRAINING[/]")
    elif cell.cordoned:
        words.append("[yellow]CORDONED[/]")
    if cell.evacuating:
        words.append("[yellow]evacuating[/]")
    return " ".join(words)


@cells_app.command("remove", cls=OneLineErrorsCommand)
@bbs_command
def cells_remove(
    cell_id: Annotated[str, typer.Argument(metavar="CELL", help="The cell's id.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Forget a cell that is gone for good: everything it held is placed again now, whatever the apps'
    --on-cell-loss. Refused while the cell heartbeats (stop or drain its rep first)."""
    from .bbs_client import Conflict, NotFound

    with connect(connection) as client:
        try:
            client.remove_cell(cell_id)
        except NotFound:
            fail(f"no cell named {cell_id!r}")
        except Conflict as exc:
            fail(str(exc))
    report_done(as_json, f"removed {cell_id}: what it held is being placed again", cell_id=cell_id,
                removed=True)


# --- tasks ----------------------------------------------------------------------------------------


def _print_task_outcome(task: Task) -> None:
    verdict = f"failed: {task.failure_reason}" if task.failed else "succeeded"
    echo(f"task {task.task_guid} {verdict} on {task.cell_id or '-'} (exit status {task.exit_status})")
    if task.result:
        echo(task.result.rstrip("\n"))


@task_app.command("run", cls=OneLineErrorsCommand)
@bbs_command
def task_run(
    command: Annotated[
        list[str] | None, typer.Argument(metavar="-- COMMAND...", help="What to run (argv).")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="The task guid (default: task-<random>).")
    ] = None,
    memory_mb: Annotated[int, typer.Option("--memory", "-m", help="Memory, MB.")] = 256,
    disk_mb: Annotated[int, typer.Option("--disk", "-d", help="Disk, MB.")] = 1024,
    stack: Annotated[str | None, typer.Option("--stack", help="Required stack (rootfs).")] = None,
    tags: Annotated[list[str] | None, typer.Option("--tag", help="Placement tag (repeatable).")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE (repeatable).")] = None,
    domain: Annotated[str | None, typer.Option("--domain", help="Domain the task belongs to.")] = None,
    path: CodePath = None,
    artifact: ArtifactOption = None,
    image: ImageOption = None,
    registry_credentials_file: CredentialsFileOption = None,
    detach: Annotated[bool, typer.Option("--detach", help="Return once the task is accepted.")] = False,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Give up waiting after this many seconds.")
    ] = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Run a one-off task; wait for it and print its exit status and result (exit 1 if it failed)."""
    from common.models import TaskCreate

    from .bbs_client import Conflict
    from .ship import code_artifacts

    if not command and image is None:
        fail("command: give the command to run after `--`, e.g. `vendue task run -- echo hi` (or --image "
             "REF to run an image's entrypoint)", USAGE_ERROR)
    fields: dict[str, Any] = {"task_guid": name or f"task-{uuid.uuid4().hex[:10]}",
                              "command": list(command or []), "memory_mb": memory_mb, "disk_mb": disk_mb}
    if (image_given := image_field(image, registry_credentials_file)) is not None:
        fields["image"] = image_given
    fields.update({k: v for k, v in {"stack": stack, "domain": domain}.items() if v is not None})
    if tags:
        fields["placement_tags"] = list(tags)
    if env:
        fields["env"] = parse_env(env)
    with code_artifacts(path, artifact) as code, connect(connection) as client:
        if code.artifacts:
            fields["artifacts"] = code.artifacts
        request: TaskCreate = validated(TaskCreate, **fields)
        code.ship(client)
        try:
            task = client.desire_task(request)
        except Conflict:
            fail(f"a task named {request.task_guid!r} already exists")
        if not detach:
            task = wait_task_completed(client, task.task_guid, timeout)
    if as_json:
        print_json(task.model_dump(mode="json"))
    elif detach:
        echo(f"task {task.task_guid} {task.state}; follow it with `vendue tasks`")
    else:
        _print_task_outcome(task)
    if not detach and task.failed:
        raise typer.Exit(FAILURE)


def wait_task_completed(client: BBSClient, task_guid: str, timeout: float | None) -> Task:
    from common.models import TaskState

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        task = client.task(task_guid)
        if task.state in (TaskState.COMPLETED, TaskState.RESOLVING):
            return task
        if deadline is not None and time.monotonic() >= deadline:
            fail(f"expected task {task_guid} to complete within {timeout:g}s; it is {task.state}")
        time.sleep(0.1)


@task_app.command("cancel", cls=OneLineErrorsCommand)
@bbs_command
def task_cancel(
    task_guid: Annotated[str, typer.Argument(help="The task guid.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Cancel a task (it completes as failed, "cancelled")."""
    from .bbs_client import BBSClient

    _act_on_task(task_guid, connection, BBSClient.cancel_task, "cancelled", as_json)


@task_app.command("delete", cls=OneLineErrorsCommand)
@bbs_command
def task_delete(
    task_guid: Annotated[str, typer.Argument(help="The task guid.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Resolve and delete a completed task."""
    from .bbs_client import BBSClient

    _act_on_task(task_guid, connection, BBSClient.resolve_task, "deleted", as_json)


def _act_on_task(task_guid: str, connection: Connection, act, done: str, as_json: bool) -> None:
    from .bbs_client import NotFound

    with connect(connection) as client:
        try:
            act(client, task_guid)
        except NotFound:
            fail(f"no task named {task_guid!r}")
    report_done(as_json, f"{done} {task_guid}", task_guid=task_guid, **{done: True})


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def tasks(
    state: Annotated[str | None, typer.Option("--state", help="Only tasks in this state.")] = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Every task: state, cell, exit status, failure, result."""
    from common.models import TaskState

    if state is not None and state.upper() not in TaskState.__members__:
        fail(f"--state: expected one of {', '.join(TaskState.__members__)}, got {state!r}", USAGE_ERROR)
    with connect(connection) as client:
        found = client.tasks(state=state.upper() if state else None)
    found.sort(key=lambda t: t.created_at)
    if as_json:
        print_json(dump(found))
        return
    table = listing_table(f"{len(found)} task(s)")
    for column in ("TASK", "STATE", "CELL", "EXIT", "FAILURE", "RESULT", "CREATED"):
        table.add_column(column, no_wrap=column not in ("FAILURE", "RESULT"))
    now = datetime.now(UTC)
    for t in found:
        first_line = t.result.strip().splitlines()[-1] if t.result.strip() else ""
        table.add_row(markup(t.task_guid), markup(t.state), markup(t.cell_id or "-"),
                      "" if t.exit_status is None else str(t.exit_status),
                      f"[red]{markup(t.failure_reason or 'failed')}[/]" if t.failed else "",
                      markup(first_line[:60]), age(t.created_at, now))
    console().print(table)
