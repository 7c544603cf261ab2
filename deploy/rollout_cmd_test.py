"""`vendue rollout status|history|pause|resume|undo` and `vendue restart` (deploy/rollout_cmd.py) against an
in-memory BBS (tests/support/fake_rollout_bbs.py): what each asks, prints and exits with."""

from __future__ import annotations

import functools
import io
import json

import pytest
import yaml
from typer.testing import CliRunner

from common.models import DesiredLRPCreate
from tests.support.fake_rollout_bbs import FakeBBS, connected

from . import rollout_cmd
from .cli import _register, app
from .terminal_text import safe_console

_register()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBBS:
    bbs = FakeBBS()
    monkeypatch.setattr(rollout_cmd, "connect", functools.partial(connected, bbs))
    bbs.add_app(DesiredLRPCreate(process_guid="web", command=["x"], instances=3))
    return bbs


def vendue(*args: str, columns: int = 200):
    return CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": str(columns)})


def rolled(fake: FakeBBS, command: str = "y", **strategy: object) -> dict:
    answer = fake.replace_desired_lrp("web", {"process_guid": "web", "command": [command], "instances": 3,
                                              "rollout": strategy})
    return answer["rollout"]


def test_status_of_an_app_never_rolled_says_so(fake: FakeBBS) -> None:
    result = vendue("rollout", "status", "web")
    assert (result.exit_code, result.stdout.strip()) == (0, "web: no rollout yet")
    assert vendue("rollout", "status", "web", "--json").stdout.strip() == "null"
    missing = vendue("rollout", "status", "nope")
    assert missing.exit_code == 1 and missing.stderr.strip() == "error: no app named 'nope'"


def test_status_says_kind_versions_state_and_progress(fake: FakeBBS) -> None:
    rolled(fake)
    result = vendue("rollout", "status", "web")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("web: update v1 -> v2 running 1/3 (1 at a time, rollback on, started ")
    as_json = json.loads(vendue("rollout", "status", "web", "--json").stdout)
    assert (as_json["kind"], as_json["to_version"], as_json["state"]) == ("update", 2, "running")


def test_history_lists_the_rollouts_newest_first_within_80_columns(fake: FakeBBS) -> None:
    rolled(fake, "y")
    fake.rollouts["web"][0].update(state="paused", reason="instance 2 crashed: " + "x" * 120)
    rolled(fake, "z")
    result = vendue("rollout", "history", "web")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "update" in line]  # piped: one row per line
    assert "v3" in rows[0] and "v2" in rows[1] and "paused" in rows[1] and "x" * 120 in rows[1]
    terminal = safe_console(width=80, file=io.StringIO())
    terminal.print(rollout_cmd.history_table("web", fake.list_rollouts("web")))
    lines = terminal.file.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80 and "REASON" in lines[2], "\n".join(lines)
    listed = json.loads(vendue("rollout", "history", "web", "--json").stdout)
    assert [r["to_version"] for r in listed] == [3, 2]


def test_output_formats_yaml_json_and_wide(fake: FakeBBS) -> None:
    rolled(fake, "y")
    fake.rollouts["web"][0].update(reason="instance 2 crashed: " + "x" * 120)
    as_yaml = vendue("rollout", "history", "web", "-o", "yaml")
    assert as_yaml.exit_code == 0, as_yaml.output
    [listed] = yaml.safe_load(as_yaml.stdout)
    assert listed == json.loads(vendue("rollout", "history", "web", "-o", "json").stdout)[0]
    assert listed == json.loads(vendue("rollout", "history", "web", "--json").stdout)[0]
    moments = [v for k, v in listed.items() if k.endswith("_at") and v is not None]
    assert moments and all(isinstance(v, str) and v.endswith("Z") for v in moments), listed
    narrow = vendue("rollout", "history", "web", columns=80)
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80, narrow.stdout
    assert "x" * 120 not in narrow.stdout and "xxxxxxxxxx │\n" in narrow.stdout, narrow.stdout  # REASON wraps
    wide = vendue("rollout", "history", "web", "-o", "wide", columns=80)
    assert "x" * 120 in wide.stdout, wide.stdout
    bad = vendue("rollout", "history", "web", "-o", "xml")
    assert bad.exit_code == 2 and "-o" in bad.output and "json, yaml, wide" in bad.output, bad.output


def test_pause_holds_a_running_rollout_and_resume_follows_it_to_the_end(fake: FakeBBS) -> None:
    rolled(fake)
    paused = vendue("rollout", "pause", "web")
    assert paused.exit_code == 0 and "paused" in paused.stdout, paused.output
    resumed = vendue("rollout", "resume", "web")
    assert resumed.exit_code == 0, resumed.output
    assert resumed.stdout.strip() == "web: version 2 rolled out to 3/3 instance(s)"


def test_pause_and_resume_without_a_rollout_to_act_on_are_one_line_exit_1(fake: FakeBBS) -> None:
    result = vendue("rollout", "pause", "web")
    assert result.exit_code == 1 and result.stderr.strip() == "error: web: cannot pause: no rollout running"
    result = vendue("rollout", "resume", "web")
    assert result.exit_code == 1 and result.stderr.strip() == "error: web: cannot resume: no rollout paused"


def test_undo_rolls_back_to_the_previous_version(fake: FakeBBS) -> None:
    rolled(fake)
    result = vendue("rollout", "undo", "web", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kind"] == "rollback"
    refused = FakeBBS()
    refused.add_app(DesiredLRPCreate(process_guid="web", command=["x"]))
    fake.apps["web"]["version"] = 1
    assert vendue("rollout", "undo", "web").stderr.strip() == "error: web: cannot undo: no previous version"


def test_restart_rolls_every_instance_and_follows_it(fake: FakeBBS) -> None:
    result = vendue("restart", "web", "--max-in-flight", "50%")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "web: restarted 3/3 instance(s)"
    assert ("restart", "web") in fake.calls


def test_restart_all_at_once_does_not_wait(fake: FakeBBS) -> None:
    result = vendue("restart", "web", "--all-at-once")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "web: every instance stopped and starting again"
    assert "get_rollout" not in [call for call, _ in fake.calls]


def test_restart_of_one_instance(fake: FakeBBS) -> None:
    result = vendue("restart", "web", "1")
    assert result.exit_code == 0 and fake.calls[-1] == ("restart_instance", "web/1"), result.output
    missing = vendue("restart", "web", "7")
    assert missing.exit_code == 1 and missing.stderr.strip() == "error: web has no instance 7"


@pytest.mark.parametrize("args", [["restart", "web", "1", "--all-at-once"], ["restart", "web", "-1"],
                                  ["restart", "web", "--max-in-flight", "0%"]])
def test_restart_refuses_bad_input_in_one_line(fake: FakeBBS, args: list[str]) -> None:
    result = vendue(*args)
    assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.output
