"""`vendue rollout status|history|pause|resume|undo APP` and `vendue restart APP [INDEX]` (docs/cli.md).

A rollout replaces an app's instances, a batch at a time, make-before-break: after a new version (push,
apply), a restart, or an undo. `status` and `history` read it; `pause` holds it where it is, `resume` goes
on (past a canary's pause too), `undo` rolls back to the previous version. `resume`, `undo` and `restart`
follow the rollout they start to its end, as push does (exit 1 if it failed; --no-wait returns at once).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any, Literal, Protocol, cast

import typer

from .cli import app
from .cli_style import FAILURE, USAGE_ERROR, OneLineErrorsCommand, OneLineErrorsGroup, fail
from .client_cmd import AsJson, Connection, age, bbs_command, connect, console, listing_table, print_json
from .terminal_text import echo, markup

rollout_app = typer.Typer(help="An app's rollouts: status, history, pause, resume, undo.",
                          no_args_is_help=True, cls=OneLineErrorsGroup)
app.add_typer(rollout_app, name="rollout")

AppName = Annotated[str, typer.Argument(metavar="APP", help="The app's process guid.", show_default=False)]
Wait = Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the rollout to its end (exit 1 if it "
                                    "failed).")]
Timeout = Annotated[float | None, typer.Option(
    "--timeout", help="Give up waiting after this many seconds (default: until it ends).")]


class RolloutClient(Protocol):
    """The BBS client's rollout methods (deploy/bbs_client.py)."""

    def get_rollout(self, guid: str) -> dict[str, Any] | None: ...
    def list_rollouts(self, guid: str) -> list[dict[str, Any]]: ...
    def rollout_action(self, guid: str, action: Literal["pause", "resume", "undo"]) -> dict[str, Any]: ...
    def restart_lrp(self, guid: str, *, all_at_once: bool = False,
                    max_in_flight: int | str = 1) -> dict[str, Any]: ...
    def restart_instance(self, guid: str, index: int) -> None: ...
    def desired_lrp(self, process_guid: str) -> Any: ...


@contextmanager
def rollout_client(connection: Connection) -> Iterator[RolloutClient]:
    with connect(connection) as client:
        yield cast(RolloutClient, client)


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime) or value is None:
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def summary(rollout: Mapping[str, Any]) -> str:
    """One line: `web: update v1 -> v2 running 2/3 (1 at a time, rollback on, started 12s ago)`."""
    options = [f"{rollout.get('max_in_flight')} at a time",
               "rollback on" if rollout.get("auto_revert") else "no rollback"]
    if rollout.get("canary"):
        options.append("canary")
    options.append(f"started {age(_moment(rollout.get('started_at')))}")
    reason = f": {rollout['reason']}" if rollout.get("reason") else ""
    return (f"{rollout.get('process_guid')}: {rollout.get('kind')} v{rollout.get('from_version')} -> "
            f"v{rollout.get('to_version')} {rollout.get('state')} "
            f"{rollout.get('done')}/{rollout.get('total')} "
            f"({', '.join(options)}){reason}")


@rollout_app.command("status", cls=OneLineErrorsCommand)
@bbs_command
def status(name: AppName, connection: Connection = Connection(), as_json: AsJson = False) -> None:
    """The app's latest rollout: kind, versions, state, done/total, why it paused or failed."""
    from .bbs_client import NotFound

    with rollout_client(connection) as client:
        try:
            rollout = client.get_rollout(name)
        except NotFound:
            rollout = None
        if rollout is None:
            _exists(client, name)
    if as_json:
        print_json(rollout)
        return
    echo(f"{name}: no rollout yet" if rollout is None else summary(rollout))


def _exists(client: RolloutClient, name: str) -> None:
    from .bbs_client import NotFound

    try:
        client.desired_lrp(name)
    except NotFound:
        fail(f"no app named {name!r}")


@rollout_app.command("history", cls=OneLineErrorsCommand)
@bbs_command
def history(name: AppName, connection: Connection = Connection(), as_json: AsJson = False) -> None:
    """The app's last rollouts, newest first."""
    from .bbs_client import NotFound

    with rollout_client(connection) as client:
        try:
            rollouts = client.list_rollouts(name)
        except NotFound:
            fail(f"no app named {name!r}")
    if as_json:
        print_json(rollouts)
        return
    console().print(history_table(name, rollouts))


def history_table(name: str, rollouts: Sequence[Mapping[str, Any]]) -> Any:
    """Seven narrow columns and the reason, which wraps: 80 columns hold it."""
    table = listing_table(f"{markup(name)}: {len(rollouts)} rollout(s)")
    for column in ("KIND", "FROM", "TO", "STATE", "DONE", "STARTED", "REASON"):
        table.add_column(column, no_wrap=column != "REASON", overflow="fold")
    for r in rollouts:
        table.add_row(markup(r.get("kind")), f"v{r.get('from_version')}", f"v{r.get('to_version')}",
                      markup(r.get("state")), f"{r.get('done')}/{r.get('total')}",
                      age(_moment(r.get("started_at"))), markup(r.get("reason") or ""))
    return table


def _act(name: str, action: Literal["pause", "resume", "undo"], connection: Connection, *, wait: bool,
         timeout: float | None, as_json: bool) -> None:
    from .bbs_client import Conflict, NotFound
    from .push_update import follow

    with rollout_client(connection) as client:
        try:
            rollout = client.rollout_action(name, action)
        except NotFound:
            _exists(client, name)
            fail(f"{name}: no rollout to {action}")
        except Conflict as exc:
            fail(f"{name}: cannot {action}: {_conflict_reason(exc)}")
        outcome = None
        if wait and action != "pause":
            outcome = follow(client, name, rollout, timeout=timeout, show_progress=not as_json)
            rollout = dict(outcome.rollout or rollout)
    if as_json:
        print_json(rollout)
    elif outcome is not None:
        if outcome.code:
            echo(f"error: {outcome.message}", err=True)
        else:
            echo(outcome.message)
    else:
        echo(summary(rollout))
    if outcome is not None and outcome.code:
        raise typer.Exit(FAILURE)


def _conflict_reason(exc: Exception) -> str:
    """The BBS's 409 detail without the method and path prefix."""
    text = str(exc)
    return text.split(": 409 ", 1)[1] if ": 409 " in text else text


@rollout_app.command("pause", cls=OneLineErrorsCommand)
@bbs_command
def pause(name: AppName, connection: Connection = Connection(), as_json: AsJson = False) -> None:
    """Hold the running rollout where it is (the instances already replaced stay)."""
    _act(name, "pause", connection, wait=False, timeout=None, as_json=as_json)


@rollout_app.command("resume", cls=OneLineErrorsCommand)
@bbs_command
def resume(name: AppName, wait: Wait = True, timeout: Timeout = None, connection: Connection = Connection(),
           as_json: AsJson = False) -> None:
    """Go on with a paused rollout (a canary's too) and follow it to its end."""
    _act(name, "resume", connection, wait=wait, timeout=timeout, as_json=as_json)


@rollout_app.command("undo", cls=OneLineErrorsCommand)
@bbs_command
def undo(name: AppName, wait: Wait = True, timeout: Timeout = None, connection: Connection = Connection(),
         as_json: AsJson = False) -> None:
    """Roll back to the previous version (a rollout of its own) and follow it to its end."""
    _act(name, "undo", connection, wait=wait, timeout=timeout, as_json=as_json)


@app.command("restart", cls=OneLineErrorsCommand)
@bbs_command
def restart(
    name: AppName,
    index: Annotated[int | None, typer.Argument(
        metavar="[INDEX]", help="Only this instance (stopped; the cluster starts it again).",
        show_default=False)] = None,
    all_at_once: Annotated[bool, typer.Option(
        "--all-at-once", help="Stop every instance at once (an outage), instead of rolling.")] = False,
    max_in_flight: Annotated[str, typer.Option(
        "--max-in-flight", help="Rolling: this many instances at once, N or N%.")] = "1",
    wait: Wait = True,
    timeout: Timeout = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Restart an app's instances, a batch at a time, make-before-break (or one instance, by INDEX)."""
    from .bbs_client import NotFound
    from .push_update import follow, parse_max_in_flight

    if index is not None and index < 0:
        fail(f"INDEX: expected 0 or more, got {index}", USAGE_ERROR)
    if index is not None and all_at_once:
        fail("--all-at-once: restarts every instance; not with INDEX", USAGE_ERROR)
    try:
        in_flight = parse_max_in_flight(max_in_flight)
    except ValueError as exc:
        fail(f"--max-in-flight: {exc}", USAGE_ERROR)
    with rollout_client(connection) as client:
        if index is not None:
            try:
                client.restart_instance(name, index)
            except NotFound:
                _exists(client, name)
                fail(f"{name} has no instance {index}")
            if as_json:
                print_json({"process_guid": name, "index": index, "restarting": True})
            else:
                echo(f"{name}: restarting instance {index} (see it with `vendue instances {name}`)")
            return
        try:
            rollout = client.restart_lrp(name, all_at_once=all_at_once, max_in_flight=in_flight)
        except NotFound:
            fail(f"no app named {name!r}")
        outcome = None
        if wait and not all_at_once:
            outcome = follow(client, name, rollout, timeout=timeout, show_progress=not as_json)
            rollout = dict(outcome.rollout or rollout)
    if as_json:
        print_json(rollout)
    elif outcome is not None:
        if outcome.code:
            echo(f"error: {outcome.message}", err=True)
        else:
            echo(outcome.message)
    elif all_at_once:
        echo(f"{name}: every instance stopped and starting again")
    else:
        echo(f"{name}: restarting {rollout.get('total')} instance(s); follow it with `vendue rollout status "
             f"{name}`")
    if outcome is not None and outcome.code:
        raise typer.Exit(FAILURE)
