"""Change an app that exists (`vendue push` on an existing app, `vendue apply`): only `instances` or
`on_cell_loss` differ, a scale; any other field, a PUT of the whole new definition with how to roll it
(a new version, replacing instances make-before-break; docs/manifest.md); the same definition, nothing.
Then, unless told not to wait, follow the rollout to its end (deploy/rollout_wait.py), with a progress
bar on a terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .manifest_plan import SCALE_FIELDS, AppPlan, plan_app, wanted_wire
from .rollout_wait import Outcome, RolloutReader, wait_rollout
from .terminal_text import markup, safe_console

if TYPE_CHECKING:
    from common.models import DesiredLRP, DesiredLRPCreate, DesiredLRPUpdate


class AppChanger(RolloutReader, Protocol):
    """What changing an app asks of the BBS client (deploy/bbs_client.py)."""

    def desired_lrp(self, process_guid: str) -> DesiredLRP: ...
    def desire_lrp(self, lrp: DesiredLRPCreate) -> DesiredLRP: ...
    def update_desired_lrp(self, process_guid: str, update: DesiredLRPUpdate) -> DesiredLRP: ...
    def replace_desired_lrp(self, guid: str, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Change:
    """What was done to one app: the plan carried out, and the rollout the BBS started (if any)."""

    plan: AppPlan
    rollout: Mapping[str, Any] | None = None
    new_version: bool = False
    version: int | None = None


def rollout_strategy(max_in_flight: int | str = 1, rollback: bool = True,
                     strategy: str = "rolling") -> dict[str, Any]:
    """The API's RolloutStrategy from push's flags."""
    return {"max_in_flight": max_in_flight, "auto_revert": rollback, "canary": strategy == "canary"}


def parse_max_in_flight(text: str) -> int | str:
    """`--max-in-flight`: N (>= 1) or N% (1..100); ValueError otherwise."""
    if text.endswith("%"):
        number = text[:-1]
        if number.isdigit() and 1 <= int(number) <= 100:
            return f"{int(number)}%"
        raise ValueError(f"expected a percentage from 1% to 100%, got {text!r}")
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise ValueError(f"expected a number of instances (1 or more) or a percentage ('25%'), got {text!r}")


def change_app(client: AppChanger, wanted: DesiredLRPCreate, current: DesiredLRP | None,
               strategy: Mapping[str, Any]) -> Change:
    """Make the app `wanted` describes so: create it, scale it, PUT a new definition with `strategy`, or
    nothing (`current`: the app as the BBS has it, None when it has none)."""
    from common.models import DesiredLRPUpdate

    wire = wanted_wire(wanted)
    if current is not None and "exec_enabled" not in wanted.model_fields_set:
        wire["exec_enabled"] = current.exec_enabled  # left as it is unless asked (push --no-exec)
    plan = plan_app(wire, None if current is None else current.model_dump(mode="json"))
    guid = wanted.process_guid
    if plan.action == "create":
        created = client.desire_lrp(wanted)
        return Change(plan, version=getattr(created, "version", None))
    if plan.action == "scale":
        update = DesiredLRPUpdate.model_validate({name: wire[name] for name in SCALE_FIELDS if name in wire})
        client.update_desired_lrp(guid, update)
        return Change(plan)
    if plan.action == "nothing":
        return Change(plan, version=getattr(current, "version", None))
    answer = client.replace_desired_lrp(guid, {**wire, "rollout": dict(strategy)})
    desired = answer.get("desired_lrp") or {}
    return Change(plan, rollout=answer.get("rollout"), new_version=bool(answer.get("new_version")),
                  version=desired.get("version"))


@contextmanager
def progress_bar(guid: str, *, show: bool) -> Iterator[Callable[[Mapping[str, Any]], None]]:
    """A callback drawing a rollout's progress on stderr while `show` and stderr is a terminal (nothing
    otherwise: a script reads the one line at the end)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = safe_console(stderr=True)
    with Progress(TextColumn("{task.fields[what]}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[state]}"), TimeElapsedColumn(), console=console,
                  disable=not (show and console.is_terminal), transient=True) as progress:
        bar = progress.add_task("rollout", total=None, what=markup(guid), state="")

        def update(rollout: Mapping[str, Any]) -> None:
            what = f"{guid} {rollout.get('kind')} to v{rollout.get('to_version')}"
            progress.update(bar, total=max(1, int(rollout.get("total") or 0)),
                            completed=int(rollout.get("done") or 0), what=markup(what),
                            state=markup(str(rollout.get("state") or "")))

        yield update


def follow(client: RolloutReader, guid: str, rollout: Mapping[str, Any], *, timeout: float | None,
           show_progress: bool) -> Outcome:
    """Wait for `rollout` to end, drawing its progress on a terminal."""
    from .bbs_client import BBSUnreachable

    with progress_bar(guid, show=show_progress) as update:
        return wait_rollout(client, guid, rollout, timeout=timeout, on_progress=update,
                            transient=(BBSUnreachable,))


def describe_change(change: Change) -> str:
    """One line for what was done when not waiting (or nothing to wait for)."""
    plan = change.plan
    version = f" (version {change.version})" if change.version is not None else ""
    if plan.action == "create":
        return f"{plan.name}: created{version}"
    if plan.action == "scale":
        return plan.describe()
    if plan.action == "nothing" or (plan.repin and not change.new_version):
        return f"{plan.name}: nothing changed{version}"
    rollout = change.rollout
    if rollout is None:
        return f"{plan.name}: new definition stored{version}, no rollout started"
    return (f"{plan.name}: rolling out version {rollout.get('to_version')} ({', '.join(plan.changed)}); "
            f"follow it with `vendue rollout status {plan.name}`")


def push_existing(client: AppChanger, lrp: DesiredLRPCreate, strategy: Mapping[str, Any], *, wait: bool,
                  timeout: float | None, as_json: bool) -> None:
    """`vendue push` of an app that exists: change it (change_app), follow its rollout unless `wait` is
    False, and say what happened; exit status 1 when the rollout failed or was rolled back."""
    import typer

    from .bbs_client import NotFound
    from .cli_style import FAILURE, fail
    from .terminal_text import echo

    try:
        current = client.desired_lrp(lrp.process_guid)
    except NotFound:  # deleted between the POST's 409 and this GET: push again
        fail(f"app {lrp.process_guid!r} was deleted while being pushed; push it again")
    change = change_app(client, lrp, current, strategy)
    outcome = None
    if wait and change.rollout is not None:
        outcome = follow(client, lrp.process_guid, change.rollout, timeout=timeout, show_progress=not as_json)
    message = outcome.message if outcome is not None else describe_change(change)
    if as_json:
        from .client_cmd import print_json

        print_json({"process_guid": lrp.process_guid, **change.plan.wire(), "version": change.version,
                    "new_version": change.new_version,
                    "rollout": dict(outcome.rollout or {}) if outcome else change.rollout,
                    "message": message})
    elif outcome is not None and outcome.code:
        echo(f"error: {message}", err=True)
    else:
        echo(message)
    if outcome is not None and outcome.code:
        raise typer.Exit(FAILURE)
