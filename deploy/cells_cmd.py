"""`vendue cells cordon|uncordon|drain CELL`: an operator's hold on a cell, through the BBS (admin).

cordon: the cell takes no new work and keeps what it runs. drain: cordon, and every instance it runs is
moved make-before-break (its replacement runs elsewhere before it stops); the rep keeps running. An
instance no other cell has room for stays where it runs, and `--wait` says why (its replacement's
placement error). uncordon: the cell takes work again; it ends a drain. The state is the BBS's: it
survives the rep's restarts and the BBS's (bbs/operations/cells.py Cells.set_mode).
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from common.models import ActualLRP, CellPresence, Presence, TaskState

from .bbs_client import BBSClient, NotFound
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, fail
from .client_cmd import AsJson, Connection, bbs_command, cell_status, cells_app, connect, print_json
from .terminal_text import echo, markup, plain, safe_console

POLL_S = 0.5  # how often `drain --wait` looks at what the cell still holds

CellArgument = Annotated[str, typer.Argument(metavar="CELL", help="The cell's id.", show_default=False)]


def _set_mode(connection: Connection, cell_id: str, mode: str) -> CellPresence:
    with connect(connection) as client:
        try:
            return client.set_cell_mode(cell_id, mode)
        except NotFound:
            fail(f"no cell named {cell_id!r}")


def _report(cell: CellPresence, as_json: bool, done: str) -> None:
    if as_json:
        print_json(cell.model_dump(mode="json"))
    else:
        safe_console().print(f"{done} {markup(cell.cell_id)}: {cell_status(cell)}", highlight=False)


@cells_app.command("cordon", cls=OneLineErrorsCommand)
@bbs_command
def cordon(cell_id: CellArgument, connection: Connection = Connection(), as_json: AsJson = False) -> None:
    """Take no new work on a cell; what it runs keeps running."""
    _report(_set_mode(connection, cell_id, "cordon"), as_json, "cordoned")


@cells_app.command("uncordon", cls=OneLineErrorsCommand)
@bbs_command
def uncordon(cell_id: CellArgument, connection: Connection = Connection(), as_json: AsJson = False) -> None:
    """Let a cordoned or draining cell take work again (ends a drain: what has not moved yet stays)."""
    _report(_set_mode(connection, cell_id, "uncordon"), as_json, "uncordoned")


@cells_app.command("drain", cls=OneLineErrorsCommand)
@bbs_command
def drain(
    cell_id: CellArgument,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until the cell holds nothing (progress bar): "
            "exit 0 when it is empty, 1 at --timeout, saying what is left.",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="With --wait: how long to wait, seconds.")
    ] = 300.0,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Cordon a cell and move what it runs elsewhere, make-before-break (each replacement runs before the
    instance it replaces stops); the rep keeps running. An instance no other cell has room for stays."""
    if timeout <= 0:
        fail(f"--timeout: must be greater than 0, got {timeout:g}", USAGE_ERROR)
    cell = _set_mode(connection, cell_id, "drain")
    if not wait:
        _report(cell, as_json, "draining")
        return
    with connect(connection) as client:
        left = _wait_empty(client, cell_id, timeout, show=not as_json)
    if as_json:
        print_json({"cell": cell.model_dump(mode="json"), "left": [entry for entry, _ in left]})
    if not left:
        if not as_json:
            echo(
                f"drained {cell_id}: it holds nothing (still cordoned; `vendue cells uncordon {cell_id}`)"
            )
        return
    if not as_json:
        echo(f"error: {cell_id} still holds {len(left)} after {timeout:g}s:", err=True)
        for _, line in left:
            echo(f"  {plain(line, lines=False)}", err=True)
    raise typer.Exit(1)


def _wait_empty(client: BBSClient, cell_id: str, timeout: float, *, show: bool) -> list[tuple[dict, str]]:
    """Poll what the cell holds until nothing (a progress bar on stderr while `show`); what is left at the
    deadline, each as JSON data and a line saying why (its replacement's placement error)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    deadline = time.monotonic() + timeout
    held = _held(client, cell_id)
    total = max(1, len(held))
    with Progress(TextColumn("draining {task.fields[cell]}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[why]}"), TimeElapsedColumn(),
                  console=safe_console(stderr=True), disable=not show, transient=True) as progress:
        bar = progress.add_task("drain", total=total, cell=markup(cell_id), why="")
        while held and time.monotonic() < deadline:
            time.sleep(POLL_S)
            held = _held(client, cell_id)
            total = max(total, len(held))
            stuck = _stuck(client, held)
            why = f"no room elsewhere: {next(iter(stuck.values()))}" if stuck else ""
            progress.update(bar, total=total, completed=total - len(held), why=markup(why, lines=False))
    stuck = _stuck(client, held)
    return [(entry, _describe(entry, stuck)) for entry in held]


def _held(client: BBSClient, cell_id: str) -> list[dict]:
    """What the cell still holds: its instances (any presence) and its running tasks, as JSON data."""
    lrps = [a.model_dump(mode="json") for a in client.actual_lrps(cell_id=cell_id)]
    tasks = [{"task_guid": t.task_guid, "state": str(t.state)}
             for t in client.tasks(state=TaskState.RUNNING) if t.cell_id == cell_id]
    return lrps + tasks


def _stuck(client: BBSClient, held: list[dict]) -> dict[tuple[str, int], str]:
    """(process_guid, index) -> the placement error of the replacement of each instance left on the cell
    whose replacement found no cell."""
    errors: dict[tuple[str, int], str] = {}
    for process_guid in sorted({entry["process_guid"] for entry in held if "process_guid" in entry}):
        for actual in client.actual_lrps(process_guid=process_guid):
            if actual.presence == Presence.ORDINARY and actual.placement_error and not actual.cell_id:
                errors[(actual.process_guid, actual.index)] = actual.placement_error
    return errors


def _describe(entry: dict, stuck: dict[tuple[str, int], str]) -> str:
    if "process_guid" not in entry:
        return f"task {entry['task_guid']} ({entry['state']}): tasks finish where they run"
    actual = ActualLRP.model_validate(entry)
    why = stuck.get((actual.process_guid, actual.index))
    moving = f"its replacement found no room: {why}" if why else "its replacement is not running yet"
    return f"{actual.process_guid}/{actual.index} ({actual.state}, {actual.presence}): {moving}"
