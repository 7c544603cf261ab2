"""`vendue apply -f vendue.yml [--dry-run]` and `vendue get app NAME -o yaml|json` (docs/manifest.md).

apply: the whole file is read and checked first (a bad file is one line naming the file, line and field,
exit 2, and nothing is applied), `path:` directories are packed and uploaded, then every app is created,
scaled, given a new version (a rollout) or left alone, and every task not run yet is run; then it waits
for the rollouts and the tasks (unless --no-wait). Exit 1 when a rollout failed or a task failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .cli import app
from .cli_style import FAILURE, USAGE_ERROR, OneLineErrorsCommand, OneLineErrorsGroup, fail
from .client_cmd import AsJson, Connection, bbs_command, connect, print_json, wait_task_completed
from .image_args import CredentialsFileOption
from .terminal_text import echo

if TYPE_CHECKING:
    from common.models import Artifact, DesiredLRP, DesiredLRPCreate

    from .bbs_client import BBSClient
    from .manifest import Located
    from .manifest_plan import AppPlan

get_app = typer.Typer(help="Print an app as a manifest (`vendue apply -f` takes it back).",
                      no_args_is_help=True, cls=OneLineErrorsGroup)
app.add_typer(get_app, name="get")


@dataclass(frozen=True, slots=True)
class Wanted:
    """One app of the file, ready to apply: its definition, how to roll it, and its plan."""

    definition: DesiredLRPCreate
    strategy: dict[str, Any]
    plan: AppPlan
    path: str | None


def wanted_apps(located: Located, current: Mapping[str, DesiredLRP],
                artifacts: Mapping[int, Artifact], credentials: dict[str, str] | None = None) -> list[Wanted]:
    """Every app of the file with its plan against `current` (the BBS's apps by name); `artifacts`: what
    each app's `path:` was packed into, by the app's position (absent in a dry run: a path's content is
    then not compared, the other fields are)."""
    from .manifest_plan import plan_app, wanted_wire

    found = []
    for n, spec in enumerate(located.manifest.applications):
        definition = spec.definition(artifacts.get(n), credentials)
        wire = wanted_wire(definition)
        now = current.get(spec.name)
        now_wire = None if now is None else now.model_dump(mode="json")
        found.append(Wanted(definition, spec.rollout.wire(), plan_app(wire, now_wire), spec.path))
    return found


def pack_paths(client: BBSClient, located: Located, base: Path, *,
               upload: bool = True) -> dict[int, Artifact]:
    """Pack (and, with `upload`, ship) every app's `path:` (relative to the manifest's directory) before
    anything is applied: a path that cannot be packed is a bad file (exit 2, nothing applied)."""
    from .manifest_path import PathUnsupported, artifact_for_path

    made = {}
    for n, spec in enumerate(located.manifest.applications):
        if spec.path is None:
            continue
        try:
            made[n] = artifact_for_path(client, base / spec.path, upload=upload)
        except PathUnsupported as exc:
            fail(f"{located.where(('applications', n, 'path'))}: {exc}", USAGE_ERROR)
    return made


def task_states(client: BBSClient, names: Sequence[str]) -> dict[str, str | None]:
    """Each task's state in the BBS, None when it has none (apply runs it)."""
    from .bbs_client import NotFound

    states: dict[str, str | None] = {}
    for name in names:
        try:
            states[name] = str(client.task(name).state)
        except NotFound:
            states[name] = None
    return states


def _task_line(name: str, state: str | None, dry_run: bool) -> str:
    if state is None:
        return f"task {name}: {'run' if dry_run else 'started'}"
    return f"task {name}: already run ({state}), not run again"


@app.command("apply", cls=OneLineErrorsCommand)
@bbs_command
def apply(
    file: Annotated[Path, typer.Option("--file", "-f", help="The manifest (docs/manifest.md).",
                                       show_default=False)],
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print what would change per app (create, new version and the fields that "
        "differ, scale only, nothing) and change nothing.")] = False,
    wait: Annotated[bool, typer.Option(
        "--wait/--no-wait", help="Wait for the rollouts and the tasks to end (exit 1 if one failed).")
    ] = True,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", help="Give up waiting for each after this many seconds (default: until it ends).")
    ] = None,
    registry_credentials_file: CredentialsFileOption = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Create or update every app, and run every task, a manifest describes."""
    from .image_args import registry_credentials
    from .manifest import ManifestError, load_manifest

    try:
        located = load_manifest(file)
    except ManifestError as exc:
        fail(str(exc), USAGE_ERROR)
    manifest = located.manifest
    # One registry's credentials for every image of the file (never in the file: deploy/image_args.py).
    credentials = registry_credentials(registry_credentials_file)
    with connect(connection) as client:
        current = {lrp.process_guid: lrp for lrp in client.desired_lrps()}
        tasks = task_states(client, [task.name for task in manifest.tasks])
        if dry_run:
            wanted = wanted_apps(located, current, pack_paths(client, located, file.parent, upload=False),
                                 credentials)
            _report_plan(wanted, tasks, as_json)
            return
        wanted = wanted_apps(located, current, pack_paths(client, located, file.parent), credentials)
        code = _apply(client, located, wanted, tasks, wait=wait, timeout=timeout, as_json=as_json,
                      credentials=credentials)
    if code:
        raise typer.Exit(code)


def _report_plan(wanted: list[Wanted], tasks: Mapping[str, str | None], as_json: bool) -> None:
    if as_json:
        print_json({"applications": [w.plan.wire() for w in wanted],
                    "tasks": [{"name": name, "state": state, "run": state is None}
                              for name, state in tasks.items()]})
        return
    for w in wanted:
        echo(w.plan.describe())
    for name, state in tasks.items():
        echo(_task_line(name, state, dry_run=True))


def _apply(client: BBSClient, located: Located, wanted: list[Wanted], tasks: Mapping[str, str | None],
           *, wait: bool, timeout: float | None, as_json: bool,
           credentials: dict[str, str] | None = None) -> int:
    """Change every app, then follow the rollouts, then run the tasks: the exit status."""
    from .push_update import change_app, describe_change, follow

    current = {lrp.process_guid: lrp for lrp in client.desired_lrps()}
    changes = [change_app(client, w.definition, current.get(w.definition.process_guid), w.strategy)
               for w in wanted]
    code = 0
    report: list[dict[str, Any]] = []
    for change in changes:
        message, rollout, failed = describe_change(change), change.rollout, 0
        if wait and change.rollout is not None:
            outcome = follow(client, change.plan.name, change.rollout, timeout=timeout,
                             show_progress=not as_json)
            message, rollout, failed = outcome.message, outcome.rollout, outcome.code
            code = code or failed
        if not as_json:
            if failed:
                echo(f"error: {message}", err=True)
            else:
                echo(message)
        report.append({**change.plan.wire(), "version": change.version, "new_version": change.new_version,
                       "rollout": None if rollout is None else dict(rollout), "message": message})
    task_report = []
    for spec in located.manifest.tasks:
        state = tasks.get(spec.name)
        if state is None:
            client.desire_task(spec.request(credentials))
            state = "PENDING"
            if wait:
                task = wait_task_completed(client, spec.name, timeout)
                state = str(task.state)
                verdict = f"failed: {task.failure_reason}" if task.failed else "succeeded"
                code = code or (FAILURE if task.failed else 0)
                line = f"task {spec.name} {verdict} (exit status {task.exit_status})"
            else:
                line = _task_line(spec.name, None, dry_run=False)
        else:
            line = _task_line(spec.name, state, dry_run=False)
        task_report.append({"name": spec.name, "state": state, "message": line})
        if not as_json:
            echo(line)
    if as_json:
        print_json({"applications": report, "tasks": task_report})
    return code


@get_app.command("app", cls=OneLineErrorsCommand)
@bbs_command
def get_app_cmd(
    name: Annotated[str, typer.Argument(help="The app's process guid.", show_default=False)],
    output: Annotated[str, typer.Option(
        "--output", "-o", help="yaml or json: a manifest `vendue apply -f` takes.")] = "yaml",
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Print an app as a manifest: applying it back changes nothing."""
    from .bbs_client import NotFound
    from .manifest import app_spec_of, dump_yaml
    from .manifest_plan import MASKED

    if output not in ("yaml", "json"):
        fail(f"-o/--output: expected yaml or json, got {output!r}", USAGE_ERROR)
    with connect(connection) as client:
        try:
            lrp = client.desired_lrp(name)
        except NotFound:
            fail(f"no app named {name!r}")
    document = {"applications": [app_spec_of(lrp)]}
    if any(value == MASKED for value in lrp.env.values()):
        echo(f"warning: the BBS hid {name}'s env values from this caller ({MASKED}): put them back before "
             "applying this to another app", err=True)
    if as_json or output == "json":
        print_json(document)
    else:
        typer.echo(dump_yaml(document), nl=False)
