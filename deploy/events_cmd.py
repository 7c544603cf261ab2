"""`vendue events`: follow the BBS's event stream, one line per event (deploy/client_cmd.py says how the
client commands find the BBS and who they are to it)."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from pydantic import BaseModel, Field, ValidationError

from common.models import EVENT_TYPES, GUID_PATTERN, Event, EventType

from .bbs_client import EventQuery
from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, fail
from .client_cmd import AsJson, Connection, bbs_command, connect
from .terminal_text import echo, plain


def summarize(event: Event) -> str:
    """One readable line for an event: who (app/index, task, cell) and what it is now."""
    data: Any = event.data
    # Changes may carry {"before": ..., "after": ...}, or wrap the record under one key.
    if isinstance(data.get("after"), dict):
        data = data["after"]
    elif len(data) == 1 and isinstance(next(iter(data.values())), dict):
        data = next(iter(data.values()))
    parts: list[str] = []
    if "process_guid" in data:
        parts.append(f"{data['process_guid']}/{data['index']}" if "index" in data else data["process_guid"])
    if "task_guid" in data:
        parts.append(str(data["task_guid"]))
    if "cell_id" in data and data["cell_id"]:
        parts.append(("@" if parts else "") + str(data["cell_id"]))
    for key in ("state", "presence", "instances", "address", "zone", "crash_count", "crash_reason",
                "placement_error", "failure_reason"):
        value = data.get(key)
        if value in (None, "", 0) or (key == "presence" and value == "ORDINARY"):
            continue
        parts.append(f"{key}={value}")
    if not parts:
        parts.append(json.dumps(event.data, default=str)[:120])
    return " ".join(parts)


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def events(
    app_guid: Annotated[
        str | None, typer.Option("--app", metavar="APP", help="Only this app's events.")
    ] = None,
    cell: Annotated[
        str | None, typer.Option("--cell", metavar="CELL", help="Only this cell's events.")
    ] = None,
    types: Annotated[
        list[str] | None,
        typer.Option(
            "--type", metavar="TYPE", help=f"Only events of this type (repeatable): {', '.join(EVENT_TYPES)}."
        ),
    ] = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Follow the BBS's event stream: one line per event (Ctrl-C to stop).

    When the BBS goes away it connects again, to another replica if --bbs lists several, and resumes where
    it was (Last-Event-ID); a `resync` line says events may have been missed there: list again
    (`vendue apps`, `instances`)."""
    try:
        wanted = EventFilterFlags(app=app_guid, cell=cell, type=list(types or ()))
    except ValidationError as exc:
        problem = exc.errors()[0]
        name = str(problem["loc"][0])
        fail(f"--{name} ({name}): {problem['msg']}", USAGE_ERROR)
    query = EventQuery(app=wanted.app, cell=wanted.cell, types=tuple(wanted.type))

    told: list[str] = []

    def reconnecting(why: str) -> None:
        if told[-1:] != [why]:  # once per reason, not once per attempt
            echo(f"reconnecting: {why}", err=True)
            told.append(why)

    def following(url: str) -> None:
        echo(f"following the events of {url} (Ctrl-C to stop)", err=True)

    with connect(connection) as client:
        try:
            for event in client.follow_events(query, on_reconnect=reconnecting, on_open=following):
                if as_json:
                    line = event.model_dump_json()
                else:
                    at = event.at.astimezone().strftime("%H:%M:%S.%f")[:-3]
                    # Every field may be what an app or a rep wrote: shown, never obeyed.
                    line = plain(f"{at}  {event.type:<24} {summarize(event)}", lines=False)
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
        except KeyboardInterrupt:
            return


class EventFilterFlags(BaseModel):
    """The filters `vendue events` takes, checked as the BBS checks them (GET /v1/events) before asking it.
    Field names are the query parameters'."""

    app: Annotated[str | None, Field(pattern=GUID_PATTERN)] = None
    cell: Annotated[str | None, Field(pattern=GUID_PATTERN)] = None
    type: list[EventType] = []
