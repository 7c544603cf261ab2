"""The client commands against a real `vendue bbs` process (no auctioneer, no reps: nothing gets placed,
which is all these tests need — argument validation, exit statuses, and the --json shapes)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from common.models import ActualLRP, CellPresence, DesiredLRP, Event, Task
from common.procutil import child_preexec, free_port, terminate_then_kill, wait_ready_file

from .cli import _register, app
from .cluster import ENTRY_POINT, PROJECT_ROOT

pytestmark = pytest.mark.timeout(120)
_register()


@pytest.fixture(scope="module")
def bbs_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir = tmp_path_factory.mktemp("bbs")
    ready = data_dir / "bbs.ready"
    nobody = f"http://127.0.0.1:{free_port()}"  # no auctioneer: start requests fail, LRPs stay UNCLAIMED
    with open(data_dir / "bbs.log", "wb") as log:
        proc = subprocess.Popen(
            [*ENTRY_POINT, "bbs", "--port", "0", "--ready-file", str(ready), "--data-dir", str(data_dir),
             "--auctioneer-url", nobody],
            stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, preexec_fn=child_preexec(),
        )
    try:
        try:
            url = str(wait_ready_file(ready, timeout_s=60.0, proc=proc)["url"])
        except (RuntimeError, TimeoutError) as exc:
            pytest.fail(f"the BBS did not start: {exc}\n{(data_dir / 'bbs.log').read_text()[-3000:]}")
        yield url
    finally:
        terminate_then_kill(proc, grace_s=10.0)


def vendue(bbs_url: str, *args: str):
    # Through the environment: a trailing `--bbs URL` would land in the COMMAND after `--`.
    return CliRunner().invoke(app, list(args), env={"VENDUE_BBS_URL": bbs_url})


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def desired_guids(bbs_url: str) -> set[str]:
    return {d["process_guid"] for d in httpx.get(f"{bbs_url}/v1/desired_lrps").json()["items"]}


def task_guids(bbs_url: str) -> set[str]:
    return {t["task_guid"] for t in httpx.get(f"{bbs_url}/v1/tasks").json()["items"]}


@pytest.mark.parametrize(("args", "field"), [
    (["push", "APP", "-m", "0", "--", "x"], "memory_mb"),
    (["push", "APP", "-d", "2000000", "--", "x"], "disk_mb"),
    (["push", "APP", "-i", "10001", "--", "x"], "instances"),
    (["push", "APP", "-i", "many", "--", "x"], "--instances"),
    (["push", "APP", "--health", "tcp", "--", "x"], "health_check.type"),
    (["push", "APP", "--strategy", "fastest", "--", "x"], "strategy"),
    (["push", "APP", "--port", "70000", "--", "x"], "ports.0"),
    (["push", "APP", "--env", "NOEQUALS", "--", "x"], "--env"),
    (["push", "APP"], "command"),
    (["push", "APP!", "--", "x"], "process_guid"),
    (["push", "APP", "--bogus", "--", "x"], "--bogus"),
    (["scale", "APP", "-i", "-1"], "instances"),
    (["scale", "APP"], "--instances"),
    (["task", "run", "-m", "0", "--", "x"], "memory_mb"),
    (["task", "run", "--name", "no way", "--", "x"], "task_guid"),
    (["task", "run"], "command"),
    (["tasks", "--state", "DONE"], "--state"),
    (["task", "bogus"], "bogus"),
])
def test_bad_input_is_one_line_naming_the_field_exit_2_and_nothing_written(bbs_url, args, field):
    name = unique("bad")
    args = [name + a[3:] if a.startswith("APP") else a for a in args]
    before_desired, before_tasks = desired_guids(bbs_url), task_guids(bbs_url)
    result = vendue(bbs_url, *args)
    assert result.exit_code == 2, f"expected exit 2 for {args}, saw {result.exit_code}: {result.output}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"expected one error line, saw {lines}"
    assert field in lines[0], f"expected the line to name {field!r}: {lines[0]}"
    assert result.stdout == ""
    assert desired_guids(bbs_url) == before_desired and task_guids(bbs_url) == before_tasks


def test_unreachable_bbs_is_one_line_and_exit_1():
    result = CliRunner().invoke(app, ["apps", "--bbs", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the BBS"), lines


def test_several_bbs_urls_are_replicas_the_one_down_is_skipped(bbs_url):
    down = f"http://127.0.0.1:{free_port()}"
    name = unique("replicated")
    pushed = vendue(f"{down},{bbs_url}", "push", name, "-i", "1", "-m", "16", "--", "sleep", "1")
    assert pushed.exit_code == 0, pushed.output
    assert name in desired_guids(bbs_url)
    listed = vendue(f"{down}, {bbs_url}", "apps", "--json")
    assert listed.exit_code == 0 and name in {a["process_guid"] for a in json.loads(listed.stdout)}, listed.output
    both_down = CliRunner().invoke(app, ["apps", "--bbs", f"{down},http://127.0.0.1:{free_port()}"])
    assert both_down.exit_code == 1
    lines = both_down.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the BBS") and down in lines[0], lines
    bad = CliRunner().invoke(app, ["apps", "--bbs", f"{bbs_url},"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --bbs:") and len(bad.stderr.splitlines()) == 1, (
        bad.stderr)


def test_push_apps_instances_scale_delete_round_trip_with_json_shapes(bbs_url):
    name = unique("web")
    pushed = vendue(bbs_url, "push", name, "-i", "2", "-m", "64", "-d", "32", "--tag", "blue", "--env", "A=1",
                    "--health", "process", "--json", "--", sys.executable, "-c", "print(1)")
    assert pushed.exit_code == 0, pushed.output
    desired = DesiredLRP.model_validate(json.loads(pushed.stdout))
    assert (desired.process_guid, desired.instances, desired.memory_mb, desired.disk_mb) == (name, 2, 64, 32)
    assert desired.placement_tags == ["blue"] and desired.env == {"A": "1"}
    assert desired.health_check.type == "process" and desired.command == [sys.executable, "-c", "print(1)"]

    again = vendue(bbs_url, "push", name, "--", "x")
    assert again.exit_code == 1 and "already exists" in again.stderr

    apps = vendue(bbs_url, "apps", "--json")
    assert apps.exit_code == 0, apps.output
    row = next(r for r in json.loads(apps.stdout) if r["process_guid"] == name)
    assert row["instances"] == 2 and row["running"] == 0 and row["memory_mb"] == 64
    assert set(row) >= {"process_guid", "instances", "running", "starting", "crashed", "placement_errors"}

    listed = vendue(bbs_url, "instances", name, "--json")
    assert listed.exit_code == 0, listed.output
    actuals = [ActualLRP.model_validate(a) for a in json.loads(listed.stdout)]
    assert [(a.process_guid, a.index, a.state) for a in actuals] == [(name, 0, "UNCLAIMED"), (name, 1, "UNCLAIMED")]

    table = vendue(bbs_url, "instances", name)
    assert table.exit_code == 0 and "UNCLAIMED" in table.stdout and "INDEX" in table.stdout

    scaled = vendue(bbs_url, "scale", name, "-i", "3", "--json")
    assert scaled.exit_code == 0 and json.loads(scaled.stdout)["instances"] == 3

    assert vendue(bbs_url, "delete", name).exit_code == 0
    assert name not in desired_guids(bbs_url)
    missing = vendue(bbs_url, "delete", name)
    assert missing.exit_code == 1 and missing.stderr.strip() == f"error: no app named '{name}'"
    assert vendue(bbs_url, "instances", name).exit_code == 1


def test_task_run_detached_and_tasks_json(bbs_url):
    guid = unique("job")
    run = vendue(bbs_url, "task", "run", "--detach", "--name", guid, "-m", "32", "--json", "--", "echo", "hi")
    assert run.exit_code == 0, run.output
    task = Task.model_validate(json.loads(run.stdout))
    assert (task.task_guid, task.state, task.memory_mb, task.command) == (guid, "PENDING", 32, ["echo", "hi"])

    listed = vendue(bbs_url, "tasks", "--json")
    assert listed.exit_code == 0, listed.output
    assert guid in {Task.model_validate(t).task_guid for t in json.loads(listed.stdout)}
    assert guid in vendue(bbs_url, "tasks").stdout

    cancelled = vendue(bbs_url, "task", "cancel", guid)
    assert cancelled.exit_code == 0, cancelled.output
    assert httpx.get(f"{bbs_url}/v1/tasks/{guid}").json()["failed"] is True


def test_cells_json_lists_presence(bbs_url):
    cell_id = unique("cell")
    presence = {"cell_id": cell_id, "zone": "z9", "rep_url": f"http://127.0.0.1:{free_port()}",
                "total": {"memory_mb": 1024, "disk_mb": 2048, "containers": 10}}
    assert httpx.put(f"{bbs_url}/v1/cells", json={"cells": [presence]}).status_code == 204
    listed = vendue(bbs_url, "cells", "--json")
    assert listed.exit_code == 0, listed.output
    cells = {c.cell_id: c for c in (CellPresence.model_validate(c) for c in json.loads(listed.stdout))}
    assert cells[cell_id].zone == "z9" and cells[cell_id].total.memory_mb == 1024
    table = vendue(bbs_url, "cells")
    assert table.exit_code == 0 and cell_id in table.stdout and "rep unreachable" in table.stdout


def test_events_json_prints_one_event_per_line(bbs_url, tmp_path: Path):
    # A real subprocess: `vendue events` follows the stream until it is stopped.
    proc = subprocess.Popen([*ENTRY_POINT, "events", "--json", "--bbs", bbs_url], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT, preexec_fn=child_preexec())
    try:
        name = unique("evt")
        # The stream may connect after our first change: keep changing until an event of ours arrives.
        for attempt in range(50):
            httpx.post(f"{bbs_url}/v1/tasks", json={"task_guid": f"{name}-{attempt}", "command": ["x"]})
            line = _read_line(proc, timeout=0.5)
            if line:
                break
        else:
            pytest.fail(f"expected an event line from `vendue events --json`; saw none "
                        f"(stderr: {proc.stderr.read() if proc.poll() is not None else 'still running'})")
        event = Event.model_validate(json.loads(line))
        assert event.type.startswith("task_") and event.data["task_guid"].startswith(name)
    finally:
        terminate_then_kill(proc, grace_s=5.0)


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    import selectors

    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if selector.select(timeout):
            return proc.stdout.readline().strip()
    return ""
