"""`vendue events`: follow the BBS's event stream, one line per event (deploy/client_cmd.py says how the
client commands find the BBS and who they are to it)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel, Field, ValidationError

from common.models import EVENT_TYPES, GUID_PATTERN, Event, EventType

from .bbs_client import EventQuery
from .cli import app
from .cli_style import USAGE_ERROR, OneLineErrorsCommand, fail
from .client_cmd import AsJson, Connection, bbs_command, connect, output_format
from .terminal_text import echo, plain
from .wire_json import wire_times

if TYPE_CHECKING:
    from .bbs_client import BBSClient


# Shown only when asked for (--type convergence_completed, or --all): one a second, saying nothing changed.
QUIET_TYPES = ("convergence_completed",)


def duration(seconds: float) -> str:
    """A duration rounded for reading: 0.4 ms, 12 ms, 1.5 s, 3 min."""
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _cell_line(event: Event, data: dict[str, Any]) -> str:
    """What happened to a cell, in the operator's words (`cell-3 cordoned`)."""
    cell = str(data.get("cell_id") or "?")
    what = {"cell_appeared": "appeared", "cell_disappeared": "disappeared (its presence expired)",
            "cell_removed": "removed (forgotten: what it held is placed again)"}.get(event.type)
    if what is None:
        what = "draining" if data.get("draining") else "cordoned" if data.get("cordoned") else "uncordoned"
    flags = [flag for flag in ("evacuating",) if data.get(flag)] + (
        ["suspect (presence expired)"] if data.get("state") == "suspect" else [])
    zone = f" in {data['zone']}" if data.get("zone") and event.type == "cell_appeared" else ""
    return ", ".join([f"{cell}{zone} {what}", *flags])


def _timing_line(data: dict[str, Any]) -> str:
    """An auction's or a convergence pass's figures, durations rounded."""
    took = data.get("duration_s")
    parts = [f"took {duration(float(took))}"] if isinstance(took, int | float) else []
    for key, value in data.items():
        if key == "duration_s" or value in (None, 0):
            continue
        shown = duration(float(value)) if key.endswith("_s") and isinstance(value, int | float) else value
        parts.append(f"{key.removesuffix('_s')}={shown}")
    return " ".join(parts) or "-"


def summarize(event: Event) -> str:
    """One readable line for an event: who (app/index, task, cell) and what it is now."""
    data: Any = event.data
    # Changes may carry {"before": ..., "after": ...}, or wrap the record under one key.
    if isinstance(data.get("after"), dict):
        data = data["after"]
    elif len(data) == 1 and isinstance(next(iter(data.values())), dict):
        data = next(iter(data.values()))
    if event.type.startswith("cell_"):
        return _cell_line(event, data)
    if event.type in ("auction_completed", "convergence_completed"):
        return _timing_line(data)
    parts: list[str] = []
    if "process_guid" in data:
        parts.append(f"{data['process_guid']}/{data['index']}" if "index" in data else data["process_guid"])
    if "task_guid" in data:
        parts.append(str(data["task_guid"]))
    if "cell_id" in data and data["cell_id"]:
        parts.append(("@" if parts else "") + str(data["cell_id"]))
    if event.type in ("exec_started", "exec_ended"):
        parts.append(f"{data.get('user', '?')} ran {data.get('program', '?')} ({data.get('args', 0)} "
                     "argument(s))")
        if event.type == "exec_ended":
            parts.append(f"exit {data.get('exit_status')}" if data.get("exit_status") is not None
                         else "dropped")
        return " ".join(parts)
    if event.type == "rollout_changed" and "to_version" in data:
        parts.append(f"v{data.get('from_version')}→v{data['to_version']} {data.get('state', '')}".rstrip())
        if data.get("total"):
            parts.append(f"{data.get('done', 0)}/{data['total']} done")
        if data.get("reason"):
            parts.append(f"reason: {data['reason']}")
        return " ".join(parts)
    for key in ("state", "presence", "version", "instances", "address", "zone", "crash_count", "crash_reason",
                "placement_error", "failure_reason"):
        value = data.get(key)
        if value in (None, "", 0) or (key == "presence" and value == "ORDINARY"):
            continue
        parts.append({"state": str(value), "version": f"v{value}", "instances": f"{value} instance(s)",
                      "crash_count": f"crash #{value}", "crash_reason": f"crashed: {value}",
                      "placement_error": f"not placed: {value}",
                      "failure_reason": f"failed: {value}"}.get(key, f"{key}={value}"))
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
    excluded: Annotated[
        list[str] | None,
        typer.Option("--exclude-type", metavar="TYPE", help="Leave out events of this type (repeatable)."),
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help=f"Also {', '.join(QUIET_TYPES)} (hidden unless --type asks).")
    ] = False,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Follow the BBS's event stream: one line per event, saying what changed (Ctrl-C to stop).

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
    unknown = [name for name in excluded or () if name not in EVENT_TYPES]
    if unknown:
        fail(f"--exclude-type: {unknown[0]!r} is not one of {', '.join(EVENT_TYPES)}", USAGE_ERROR)
    hidden = set(excluded or ()) | {t for t in QUIET_TYPES if not everything and t not in wanted.type}

    told: list[str] = []

    def reconnecting(why: str) -> None:
        if told[-1:] != [why]:  # once per reason, not once per attempt
            echo(f"reconnecting: {why}", err=True)
            told.append(why)

    def following(url: str) -> None:
        echo(f"following the events of {url} (Ctrl-C to stop)", err=True)

    yaml_output = output_format() == "yaml"
    with connect(connection) as client:
        if wanted.app is not None:
            warn_if_no_app(client, wanted.app)
        try:
            for event in client.follow_events(query, on_reconnect=reconnecting, on_open=following):
                if event.type in hidden:
                    continue
                if as_json:
                    record = wire_times(event.model_dump(mode="json"))
                    line = json.dumps(record) if not yaml_output else _yaml_document(record)
                else:
                    at = event.at.astimezone().strftime("%H:%M:%S.%f")[:-3]
                    # Every field may be what an app or a rep wrote: shown, never obeyed.
                    line = plain(f"{at}  {event.type:<24} {summarize(event)}", lines=False)
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
        except KeyboardInterrupt:
            return


def _yaml_document(record: dict[str, Any]) -> str:
    """One event as a YAML document of its own (`---`), for `-o yaml`."""
    import yaml

    return "---\n" + yaml.safe_dump(record, sort_keys=False).rstrip("\n")


def warn_if_no_app(client: BBSClient, name: str) -> None:
    """A misspelt --app would follow nothing, silently: said on stderr (it may still be pushed later)."""
    from .bbs_client import NotFound

    try:
        client.desired_lrp(name)
    except NotFound:
        echo(f"warning: --app: no app named {name!r} (yet): its events show once it is pushed", err=True)


class EventFilterFlags(BaseModel):
    """The filters `vendue events` takes, checked as the BBS checks them (GET /v1/events) before asking it.
    Field names are the query parameters'."""

    app: Annotated[str | None, Field(pattern=GUID_PATTERN)] = None
    cell: Annotated[str | None, Field(pattern=GUID_PATTERN)] = None
    type: list[EventType] = []
