"""End to end: `vendue apply -f` (create, idempotent, --dry-run), `vendue push` on an existing app (a rolling
update, and a bad version rolled back), `vendue restart`, and `vendue get app -o yaml` round-tripping —
the CLI as an operator runs it, against real processes with TLS on, on both transports."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .conftest import APP_COMMAND, E2ECluster, brief, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e]

CLUSTER = {"cells": 2, "zones": 2}
FIRST_PLACEMENT_S = 60.0  # a cluster's first start request may wait for its auctioneer's lease
ROLLOUT_CLI_S = 150.0  # a CLI call that follows a rollout: each new instance must start and pass its check


def desired(c: E2ECluster, guid: str) -> dict | None:
    return next((d for d in c.bbs.desired() if d["process_guid"] == guid), None)


def manifest(path: Path, apps: list[dict], tasks: list[dict] = ()) -> str:
    """A manifest file (JSON is YAML) of `apps` and `tasks`."""
    path.write_text(json.dumps({"applications": apps, "tasks": list(tasks)}, indent=2))
    return str(path)


def instance_versions(c: E2ECluster, guid: str) -> dict[int, int]:
    listed = c.cli("instances", guid, "--json")
    assert listed.code == 0, f"expected `vendue instances` to succeed, saw {listed.code}: {listed.output}"
    return {a["index"]: a.get("version") for a in json.loads(listed.stdout) if a["state"] == "RUNNING"}


def test_apply_creates_then_changes_nothing_and_a_dry_run_changes_nothing(
        shared_cluster: E2ECluster, tmp_path: Path) -> None:
    c = shared_cluster
    guid, task = c.guid("site"), c.guid("migrate")
    app = {"name": guid, "command": APP_COMMAND, "instances": 2, "memory_mb": 64, "disk_mb": 64,
           "env": {"GREETING": "hello"}}
    job = {"name": task, "command": [sys.executable, "-c", "print(6 * 7)"], "memory_mb": 64, "disk_mb": 64}
    path = manifest(tmp_path / "vendue.yml", [app], [job])

    planned = c.cli("apply", "-f", path, "--dry-run")
    assert planned.code == 0, f"expected the dry run to succeed, saw {planned.code}: {planned.output}"
    assert planned.stdout.splitlines() == [f"{guid}: create", f"task {task}: run"], planned.stdout
    assert desired(c, guid) is None and task not in {t["task_guid"] for t in c.bbs.tasks()}, (
        "expected a dry run to create nothing")

    applied = c.cli("apply", "-f", path, timeout=FIRST_PLACEMENT_S + 30)
    assert applied.code == 0, f"expected apply to succeed, saw {applied.code}: {applied.output}"
    assert f"task {task} succeeded" in applied.stdout, applied.stdout
    wait_all_running(c.bbs, guid, 2, timeout=FIRST_PLACEMENT_S)
    version = desired(c, guid)["version"]

    again = c.cli("apply", "-f", path)
    assert again.code == 0, f"expected a second apply to succeed, saw {again.code}: {again.output}"
    assert again.stdout.splitlines() == [f"{guid}: nothing changed (version {version})",
                                         f"task {task}: already run (COMPLETED), not run again"], again.stdout
    assert desired(c, guid)["version"] == version, "expected a second apply to make no new version"

    changed = manifest(tmp_path / "changed.yml", [{**app, "env": {"GREETING": "bye"}, "instances": 3}])
    planned = c.cli("apply", "-f", changed, "--dry-run")
    assert planned.code == 0 and planned.stdout.strip() == f"{guid}: new version (env); instances 2 -> 3", (
        planned.output)
    after = desired(c, guid)
    assert (after["version"], after["instances"], after["env"]) == (version, 2, {"GREETING": "hello"}), (
        f"expected a dry run to change nothing, saw {after}")

    printed = c.cli("get", "app", guid, "-o", "yaml")
    assert printed.code == 0, f"expected `vendue get app` to succeed, saw {printed.code}: {printed.output}"
    (tmp_path / "printed.yml").write_text(printed.stdout)
    back = c.cli("apply", "-f", str(tmp_path / "printed.yml"))
    assert back.code == 0 and back.stdout.strip() == f"{guid}: nothing changed (version {version})", (
        f"expected `get app -o yaml` to apply as nothing, saw {back.code}: {back.output}\n{printed.stdout}")


def test_a_bad_manifest_is_one_line_with_its_line_and_nothing_is_applied(
        shared_cluster: E2ECluster, tmp_path: Path) -> None:
    c = shared_cluster
    guid = c.guid("typo")
    path = tmp_path / "vendue.yml"
    path.write_text(f"applications:\n  - name: {guid}\n    command: [x]\n    memroy_mb: 64\n")
    result = c.cli("apply", "-f", str(path))
    assert result.code == 2, f"expected exit 2, saw {result.code}: {result.output}"
    assert result.stderr.splitlines() == [
        f"error: {path}:4: applications[0].memroy_mb: Extra inputs are not permitted"], result.stderr
    assert desired(c, guid) is None


def test_push_rolls_a_new_env_out_and_rolls_a_bad_version_back(shared_cluster: E2ECluster) -> None:
    c = shared_cluster
    guid = c.guid("roll")
    base = ("push", guid, "-i", "2", "-m", "64", "-d", "64")
    created = c.cli(*base, "--", *APP_COMMAND)
    assert created.code == 0, f"expected the first push to succeed, saw {created.code}: {created.output}"
    wait_all_running(c.bbs, guid, 2, timeout=FIRST_PLACEMENT_S)
    first = desired(c, guid)["version"]

    rolled = c.cli(*base, "-e", "GREETING=hi", "--", *APP_COMMAND, timeout=ROLLOUT_CLI_S)
    assert rolled.code == 0, f"expected the update to roll out, saw {rolled.code}: {rolled.output}"
    expected = f"{guid}: version {first + 1} rolled out to 2/2 instance(s)"
    assert rolled.stdout.strip() == expected, rolled.stdout
    wait_for(lambda: expect(instance_versions(c, guid) == {0: first + 1, 1: first + 1},
                            f"versions {instance_versions(c, guid)}"),
             30.0, f"both instances of {guid} on version {first + 1}")
    assert desired(c, guid)["env"] == {"GREETING": "hi"}

    bad = c.cli(*base, "--", sys.executable, "-c", "raise SystemExit(3)", timeout=ROLLOUT_CLI_S)
    assert bad.code == 1, f"expected a bad version to fail the push, saw {bad.code}: {bad.output}"
    [line] = bad.stderr.splitlines()
    assert line.startswith(f"error: {guid}: version {first + 2} failed and was rolled back to version "), line
    running = wait_all_running(c.bbs, guid, 2, timeout=60.0)  # each answers HTTP: the old version serves
    assert all(a.get("version") != first + 2 for a in running.values()), (
        f"expected no instance on the bad version, saw {brief(list(running.values()))}")


def test_restart_rolls_every_instance(shared_cluster: E2ECluster) -> None:
    c = shared_cluster
    guid = c.guid("restart")
    created = c.cli("push", guid, "-i", "2", "-m", "64", "-d", "64", "--", *APP_COMMAND)
    assert created.code == 0, created.output
    before = wait_all_running(c.bbs, guid, 2, timeout=FIRST_PLACEMENT_S)

    restarted = c.cli("restart", guid, timeout=ROLLOUT_CLI_S)
    assert restarted.code == 0, f"expected the restart to succeed, saw {restarted.code}: {restarted.output}"
    assert restarted.stdout.strip() == f"{guid}: restarted 2/2 instance(s)", restarted.stdout
    after = wait_all_running(c.bbs, guid, 2, timeout=60.0)
    same = [i for i in after if after[i]["instance_guid"] == before[i]["instance_guid"]]
    assert not same, f"expected every index restarted (new instance guids), saw the same for {same}"
    history = c.cli("rollout", "history", guid, "--json")
    assert history.code == 0 and json.loads(history.stdout)[0]["kind"] == "restart", history.output
