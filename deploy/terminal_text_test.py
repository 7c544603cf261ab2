"""What an app or a rep wrote never reaches the operator's terminal as control sequences: every human-readable
command prints it escaped; --json leaves it to the JSON encoder."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from common.models import ActualLRP, CellPresence, DesiredLRP, Event, PlacementExplanation, Task

from .bbs_client import BBSClient
from .cli import _register, app
from .terminal_text import markup, plain

_register()

TITLE = "\x1b]0;PWNED\x07"  # OSC: sets the terminal's title
CSI = "\x1b[2J\x1b[31m"  # clears the screen, then red
C1 = "\x9b2J\x9d0;PWNED\x9c"  # the same as 8-bit controls
BIDI = "\u202etxt.exe"  # right-to-left override
LINK = "[link=https://evil.example]click[/link][red]"  # rich markup: would become an OSC 8 hyperlink
HOSTILE = f"ok{TITLE}{CSI}{C1}{BIDI}\r\b{LINK}"
# What may not reach stdout raw: ESC, BEL, CR, BS, C1, bidi; and the OSC 8 rich would make of LINK.
FORBIDDEN = ["\x1b", "\x07", "\r", "\b", *map(chr, range(0x80, 0xA0)), "\u202e"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the colours rich itself writes on a terminal


def assert_shown_not_obeyed(output: str) -> None:
    for char in FORBIDDEN:
        assert char not in output, f"{char!r} reached the terminal raw: {output!r}"
    assert "PWNED" in output  # shown, escaped: nothing lost


def test_plain_escapes_every_control_and_keeps_layout() -> None:
    text = plain(f"line one{TITLE}\n\tline two{C1}{BIDI}\x7f")
    assert text == "line one\\x1b]0;PWNED\\x07\n\tline two\\x9b2J\\x9d0;PWNED\\x9c\\u202etxt.exe\\x7f"
    assert plain("a\nb\tc", lines=False) == "a\\x0ab\\x09c"
    assert plain("plain text, ünïcode and → arrows") == "plain text, ünïcode and → arrows"
    assert markup(LINK) == "\\[link=https://evil.example]click\\[/link]\\[red]"


@pytest.fixture
def hostile_bbs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A BBS client whose every answer carries HOSTILE in each field an app or a rep sets."""
    task = Task.model_validate({
        "task_guid": "job-1", "command": ["x"], "created_at": NOW, "updated_at": NOW, "state": "COMPLETED",
        "cell_id": f"cell{TITLE}", "failed": True, "failure_reason": HOSTILE,
        "result": f"{HOSTILE}\n{HOSTILE}", "exit_status": 1,
    })
    desired = DesiredLRP.model_validate({
        "process_guid": "web", "instances": 1, "created_at": NOW,
        "modification_tag": {"epoch": "e", "index": 0},
    })
    actual = ActualLRP.model_validate({
        "process_guid": "web", "index": 0, "since": NOW, "modification_tag": {"epoch": "e", "index": 0},
        "cell_id": f"cell{CSI}", "zone": f"z{C1}", "address": f"10.0.0.1:80{TITLE}",
        "placement_error": HOSTILE, "crash_reason": HOSTILE,
    })
    # The models refuse these in an id or a URL; a BBS of another version might not: shown escaped anyway.
    cell = CellPresence.model_validate({
        "cell_id": "cell-1", "zone": "z", "rep_url": "https://rep:1800",
        "total": {"memory_mb": 1, "disk_mb": 1, "containers": 1},
    }).model_copy(update={"cell_id": f"cell{TITLE}", "zone": f"z{BIDI}", "rep_url": f"https://rep{CSI}",
                          "isolation": HOSTILE})
    explanation = PlacementExplanation.model_validate({
        "process_guid": "web", "index": 0, "placed": False, "error": HOSTILE, "detail": HOSTILE,
    })
    event = Event.model_validate({"type": "actual_lrp_changed", "at": NOW, "data": {
        "process_guid": "web", "index": 0, "cell_id": f"cell{TITLE}", "address": HOSTILE,
        "placement_error": HOSTILE,
    }})
    answers: dict[str, Any] = {
        "tasks": lambda self, **_: [task], "task": lambda self, guid: task,
        "desire_task": lambda self, request: task,
        "desired_lrps": lambda self: [desired], "desired_lrp": lambda self, name: desired,
        "actual_lrps": lambda self, *_, **__: [actual], "cells": lambda self, **_: [cell],
        "placement": lambda self, name, index: explanation,
        "follow_events": lambda self, *a, **k: iter([event]),
    }
    for name, answer in answers.items():
        monkeypatch.setattr(BBSClient, name, answer)
    yield


@pytest.mark.parametrize("args", [
    ["task", "run", "--", "x"],
    ["tasks"],
    ["apps"],
    ["instances", "web"],
    ["cells"],
    ["why", "web", "0"],
    ["events"],
])
@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_no_command_prints_an_apps_control_sequences_raw(
    hostile_bbs: None, args: list[str], terminal: bool
) -> None:
    # On a terminal (FORCE_COLOR) rich writes styles of its own, and would write a hyperlink for [link=].
    env = {"VENDUE_BBS_URL": "http://127.0.0.1:9", "VENDUE_TOKEN": None,
           **({"FORCE_COLOR": "1", "COLUMNS": "2000"} if terminal else {"FORCE_COLOR": None})}
    result = CliRunner().invoke(app, args, env=env)
    assert "\x1b]8;" not in result.stdout, "an app's [link=...] became a hyperlink"
    assert_shown_not_obeyed(SGR.sub("", result.stdout))
    assert "\x1b" not in result.stderr
    if terminal and args[0] != "events":  # every rich line: the markup shown as text, not applied
        assert "[link=https://evil.example]click[/link][red]" in SGR.sub("", result.stdout)


@pytest.mark.parametrize(("args", "field"), [
    (["tasks", "--json"], "failure_reason"), (["instances", "web", "--json"], "crash_reason"),
])
def test_json_is_left_to_the_encoder(hostile_bbs: None, args: list[str], field: str) -> None:
    result = CliRunner().invoke(app, args, env={"VENDUE_BBS_URL": "http://127.0.0.1:9", "VENDUE_TOKEN": None})
    assert result.exit_code == 0, result.output
    for char in FORBIDDEN:
        assert char not in result.stdout, char
    assert json.loads(result.stdout)[0][field] == HOSTILE  # as the app wrote it, for scripts
