"""`vendue apply` and `vendue get app` (deploy/apply_cmd.py), and `vendue push` on an existing app
(deploy/push_update.py), against an in-memory BBS (tests/support/fake_rollout_bbs.py): what each changes,
what it prints, its exit status; a bad file changes nothing."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from common.models import DesiredLRPCreate
from tests.support.fake_rollout_bbs import FAIL_REASON, FakeBBS, connected

from . import apply_cmd, client_cmd
from .cli import _register, app

_register()
ROLLED_BACK = f"error: web: version 2 failed and was rolled back to version 1: {FAIL_REASON}"

MANIFEST = """\
applications:
  - name: web
    command: [python3, app.py]
    instances: 2
    memory_mb: 64
    env:
      GREETING: hello
  - name: worker
    command: [python3, worker.py]
tasks:
  - name: migrate
    command: [./migrate.sh]
"""


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBBS:
    bbs = FakeBBS()
    for module in (apply_cmd, client_cmd):
        monkeypatch.setattr(module, "connect", functools.partial(connected, bbs))
    return bbs


def vendue(*args: str):
    return CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})


def write(tmp_path: Path, text: str = MANIFEST) -> str:
    path = tmp_path / "vendue.yml"
    path.write_text(text)
    return str(path)


def test_apply_creates_every_app_and_runs_the_tasks(fake: FakeBBS, tmp_path: Path) -> None:
    result = vendue("apply", "-f", write(tmp_path))
    assert result.exit_code == 0, result.output
    assert fake.writes() == [("create", "web"), ("create", "worker"), ("run_task", "migrate")]
    assert fake.apps["web"]["env"] == {"GREETING": "hello"} and fake.apps["web"]["memory_mb"] == 64
    assert fake.apps["worker"]["memory_mb"] == 256  # push's default
    assert result.stdout.splitlines() == ["web: created (version 1)", "worker: created (version 1)",
                                          "task migrate succeeded (exit status 0)"]


def test_apply_twice_changes_nothing_the_second_time(fake: FakeBBS, tmp_path: Path) -> None:
    path = write(tmp_path)
    assert vendue("apply", "-f", path).exit_code == 0
    fake.calls.clear()
    again = vendue("apply", "-f", path)
    assert again.exit_code == 0, again.output
    assert fake.writes() == [], f"expected no write, saw {fake.writes()}"
    assert again.stdout.splitlines() == [
        "web: nothing changed (version 1)", "worker: nothing changed (version 1)",
        "task migrate: already run (COMPLETED), not run again"]


def test_dry_run_says_what_would_change_and_changes_nothing(fake: FakeBBS, tmp_path: Path) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["python3", "app.py"], instances=2,
                                  memory_mb=64, env={"GREETING": "bye"}))
    fake.add_app(DesiredLRPCreate(process_guid="worker", command=["python3", "worker.py"], instances=4))
    result = vendue("apply", "-f", write(tmp_path), "--dry-run")
    assert result.exit_code == 0, result.output
    assert fake.writes() == []
    assert result.stdout.splitlines() == ["web: new version (env)", "worker: scale only (instances 4 -> 1)",
                                          "task migrate: run"]
    as_json = json.loads(vendue("apply", "-f", write(tmp_path), "--dry-run", "--json").stdout)
    assert [(a["name"], a["action"], a["changed"]) for a in as_json["applications"]] == [
        ("web", "update", ["env"]), ("worker", "scale", [])]


def test_a_new_definition_rolls_out_with_the_files_strategy(fake: FakeBBS, tmp_path: Path) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["old"], instances=2))
    text = ("applications:\n  - name: web\n    command: [new]\n    instances: 2\n"
            "    rollout:\n      max_in_flight: 50%\n      rollback: false\n")
    result = vendue("apply", "-f", write(tmp_path, text))
    assert result.exit_code == 0, result.output
    assert fake.writes() == [("put", "web")] and fake.version("web") == 2
    assert fake.rollouts["web"][0]["auto_revert"] is False
    assert result.stdout.strip() == "web: version 2 rolled out to 2/2 instance(s)"


def test_a_failed_rollout_is_exit_1_with_the_reason(fake: FakeBBS, tmp_path: Path) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["old"]))
    fake.failing.add(("bad",))
    result = vendue("apply", "-f", write(tmp_path, "applications:\n  - name: web\n    command: [bad]\n"))
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == ROLLED_BACK
    assert fake.apps["web"]["command"] == ["old"]


def test_a_bad_file_is_one_line_exit_2_and_nothing_applied(fake: FakeBBS, tmp_path: Path) -> None:
    text = MANIFEST.replace("memory_mb: 64", "memory_mb: lots")
    path = write(tmp_path, text)
    result = vendue("apply", "-f", path)
    assert result.exit_code == 2 and fake.calls == []
    assert result.stderr.splitlines() == [
        f"error: {path}:5: applications[0].memory_mb: Input should be a valid integer, unable to parse "
        "string as an integer"]


def test_a_path_is_packed_and_uploaded_once_and_dry_run_uploads_nothing(
        fake: FakeBBS, tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "app.py").write_text("print('hi')\n")
    path = write(tmp_path, "applications:\n  - name: site\n    command: [python3, app.py]\n    path: site\n")

    planned = vendue("apply", "-f", path, "--dry-run")
    assert planned.exit_code == 0, planned.output
    assert fake.writes() == [] and fake.blobs == {}

    assert vendue("apply", "-f", path).exit_code == 0
    assert [call[0] for call in fake.writes()] == ["upload_blob", "create"]
    (digest,) = fake.blobs
    assert fake.apps["site"]["artifacts"] == [{"digest": digest, "url": None, "dest": "."}]

    fake.calls.clear()
    again = vendue("apply", "-f", path)
    assert again.exit_code == 0 and fake.writes() == [], "unchanged code is neither uploaded nor rolled out"

    (tmp_path / "site" / "app.py").write_text("print('changed')\n")
    changed = vendue("apply", "-f", path, "--dry-run")
    assert "new version (source_blob, artifacts)" in changed.stdout, changed.stdout


def test_a_path_that_is_no_directory_is_refused_before_anything_is_applied(
        fake: FakeBBS, tmp_path: Path) -> None:
    text = "applications:\n  - name: site\n    command: [x]\n    path: nowhere\n"
    result = vendue("apply", "-f", write(tmp_path, text))
    assert result.exit_code == 2, result.output
    assert "vendue.yml:4: applications[0].path: no such directory" in result.stderr
    assert fake.writes() == []


def test_get_app_prints_a_manifest_that_applies_as_nothing(fake: FakeBBS, tmp_path: Path) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["python3", "app.py"], instances=3,
                                  memory_mb=64, env={"A": "1"}, placement_tags=["blue"],
                                  health_check={"type": "http", "path": "/ok"}))
    printed = vendue("get", "app", "web", "-o", "yaml")
    assert printed.exit_code == 0, printed.output
    assert "name: web" in printed.stdout and "memory_mb: 64" in printed.stdout
    fake.calls.clear()
    applied = vendue("apply", "-f", write(tmp_path, printed.stdout))
    assert applied.exit_code == 0, applied.output
    assert fake.writes() == [] and applied.stdout.strip() == "web: nothing changed (version 1)"
    as_json = json.loads(vendue("get", "app", "web", "-o", "json").stdout)
    assert as_json["applications"][0]["tags"] == ["blue"]
    assert vendue("get", "app", "nope").exit_code == 1
    assert vendue("get", "app", "web", "-o", "xml").exit_code == 2


def test_push_on_an_existing_app_rolls_out_the_new_definition(fake: FakeBBS) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["x"], instances=3))
    result = vendue("push", "web", "-i", "3", "-e", "A=2", "--max-in-flight", "2", "--", "x")
    assert result.exit_code == 0, result.output
    assert fake.writes() == [("create", "web"), ("put", "web")]  # the create is refused: it exists
    assert fake.rollouts["web"][0]["max_in_flight"] == 2
    assert result.stdout.strip() == "web: version 2 rolled out to 3/3 instance(s)"


def test_push_of_only_another_count_scales(fake: FakeBBS) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["x"], instances=3))
    result = vendue("push", "web", "-i", "5", "--", "x")
    assert result.exit_code == 0, result.output
    assert fake.writes() == [("create", "web"), ("scale", "web")] and fake.version("web") == 1
    assert result.stdout.strip() == "web: scale only (instances 3 -> 5)"


def test_push_of_a_bad_version_exits_1_after_the_rollback(fake: FakeBBS) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["x"]))
    fake.failing.add(("bad",))
    result = vendue("push", "web", "--", "bad")
    assert result.exit_code == 1
    assert result.stderr.strip() == ROLLED_BACK


def test_push_canary_stops_at_its_pause_and_says_how_to_go_on(fake: FakeBBS) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["x"], instances=4))
    result = vendue("push", "web", "-i", "4", "--strategy", "canary", "--", "y")
    assert result.exit_code == 0, result.output
    assert fake.rollouts["web"][0]["canary"] is True
    assert "canary of version 2 running (1/4); `vendue rollout resume web` continues" in result.stdout


def test_push_no_wait_returns_once_the_rollout_started(fake: FakeBBS) -> None:
    fake.add_app(DesiredLRPCreate(process_guid="web", command=["x"]))
    result = vendue("push", "web", "--no-wait", "--", "y")
    assert result.exit_code == 0, result.output
    assert "get_rollout" not in [call for call, _ in fake.calls]
    assert result.stdout.strip() == ("web: rolling out version 2 (command); follow it with "
                                     "`vendue rollout status web`")


@pytest.mark.parametrize("flag", ["0", "101%", "many", "-1"])
def test_push_refuses_a_bad_max_in_flight(fake: FakeBBS, flag: str) -> None:
    result = vendue("push", "web", "--max-in-flight", flag, "--", "x")
    assert result.exit_code == 2 and result.stderr.startswith("error: --max-in-flight:"), result.output
    assert fake.calls == []


def test_push_strategy_still_takes_a_placement_strategy(fake: FakeBBS) -> None:
    result = vendue("push", "web", "--strategy", "binpack", "--", "x")
    assert result.exit_code == 0, result.output
    assert fake.apps["web"]["strategy"] == "binpack"
