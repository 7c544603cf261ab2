"""The client commands against a real `vendue bbs` process (conftest.py's `bbs`; no auctioneer, no reps:
nothing gets placed, which is all these tests need — argument validation, exit statuses, the --json shapes,
and who the CLI is: the BBS serves HTTPS with a certificate from a CA of the module's, and the CLI comes as
its admin, through VENDUE_TLS_*, unless a test says otherwise)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from common.models import ActualLRP, CellPresence, DesiredLRP, Event, Task
from common.procutil import child_preexec, free_port, terminate_then_kill
from common.tls import TLSFiles, client_context, issue
from tests.support.polling import wait_for
from tests.support.terminal import run_in_terminal

from .cli import _register, app
from .cluster import ENTRY_POINT, PROJECT_ROOT

pytestmark = pytest.mark.timeout(120)
_register()


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


def desired_guids(bbs) -> set[str]:
    return {d["process_guid"] for d in bbs.http.get("/v1/desired_lrps").json()["items"]}


def task_guids(bbs) -> set[str]:
    return {t["task_guid"] for t in bbs.http.get("/v1/tasks").json()["items"]}


@pytest.mark.parametrize(("args", "field"), [
    (["push", "APP", "-m", "0", "--", "x"], "-m/--memory (memory_mb)"),
    (["push", "APP", "-d", "2000000", "--", "x"], "-d/--disk (disk_mb)"),
    (["push", "APP", "-i", "10001", "--", "x"], "-i/--instances (instances)"),
    (["push", "APP", "-i", "many", "--", "x"], "--instances"),
    (["push", "APP", "--health", "tcp", "--", "x"], "--health (health_check.type)"),
    (["push", "APP", "--health-interval", "0", "--", "x"], "--health-interval (health_check.interval_s)"),
    (["push", "APP", "--health-timeout", "0", "--", "x"],
     "--health-timeout (health_check.invocation_timeout_s)"),
    (["push", "APP", "--health-threshold", "0", "--", "x"],
     "--health-threshold (health_check.failure_threshold)"),
    (["push", "APP", "--health-start-timeout", "-1", "--", "x"],
     "--health-start-timeout (health_check.timeout_s)"),
    (["push", "APP", "--health-path", "health", "--", "x"], "--health-path (health_check.path)"),
    (["push", "APP", "--strategy", "fastest", "--", "x"], "--strategy (strategy)"),
    (["push", "APP", "--port", "70000", "--", "x"], "--port (ports.0)"),
    (["push", "APP", "--env", "NOEQUALS", "--", "x"], "--env"),
    (["push", "APP"], "command"),
    (["push", "APP!", "--", "x"], "NAME (process_guid)"),
    (["push", "APP", "--bogus", "--", "x"], "--bogus"),
    (["scale", "APP", "-i", "-1"], "-i/--instances (instances)"),
    (["scale", "APP"], "--instances"),
    (["push", "APP", "--on-cell-loss", "sometimes", "--", "x"], "--on-cell-loss (on_cell_loss)"),
    (["scale", "APP", "--on-cell-loss", "never"], "on_cell_loss"),
    (["cells", "remove"], "CELL"),
    (["task", "run", "-m", "0", "--", "x"], "-m/--memory (memory_mb)"),
    (["task", "run", "--name", "no way", "--", "x"], "--name (task_guid)"),
    (["task", "run"], "command"),
    (["tasks", "--state", "DONE"], "--state"),
    (["task", "bogus"], "bogus"),
])
def test_bad_input_is_one_line_naming_the_field_exit_2_and_nothing_written(bbs, args, field):
    name = unique("bad")
    args = [name + a[3:] if a.startswith("APP") else a for a in args]
    before_desired, before_tasks = desired_guids(bbs), task_guids(bbs)
    result = bbs.vendue(*args)
    assert result.exit_code == 2, f"expected exit 2 for {args}, saw {result.exit_code}: {result.output}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), f"expected one error line, saw {lines}"
    assert field in lines[0], f"expected the line to name {field!r}: {lines[0]}"
    assert result.stdout == ""
    assert desired_guids(bbs) == before_desired and task_guids(bbs) == before_tasks


def test_unreachable_bbs_is_one_line_and_exit_1():
    result = CliRunner().invoke(app, ["apps", "--bbs", f"http://127.0.0.1:{free_port()}"])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the BBS"), lines


def test_several_bbs_urls_are_replicas_the_one_down_is_skipped(bbs):
    down = f"http://127.0.0.1:{free_port()}"
    name = unique("replicated")
    pushed = bbs.vendue("push", name, "-i", "1", "-m", "16", "--", "sleep", "1", url=f"{down},{bbs.url}")
    assert pushed.exit_code == 0, pushed.output
    assert name in desired_guids(bbs)
    listed = bbs.vendue("apps", "--json", url=f"{down}, {bbs.url}")
    assert listed.exit_code == 0 and name in {a["process_guid"] for a in json.loads(listed.stdout)}, (
        listed.output
    )
    both_down = CliRunner().invoke(app, ["apps", "--bbs", f"{down},http://127.0.0.1:{free_port()}"])
    assert both_down.exit_code == 1
    lines = both_down.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach the BBS") and down in lines[0], lines
    bad = CliRunner().invoke(app, ["apps", "--bbs", f"{bbs.url},"])
    assert (
        bad.exit_code == 2 and bad.stderr.startswith("error: --bbs:") and len(bad.stderr.splitlines()) == 1
    ), bad.stderr


def test_push_apps_instances_scale_delete_round_trip_with_json_shapes(bbs):
    name = unique("web")
    pushed = bbs.vendue("push", name, "-i", "2", "-m", "64", "-d", "32", "--tag", "blue", "--env", "A=1",
                    "--health", "process", "--json", "--", sys.executable, "-c", "print(1)")
    assert pushed.exit_code == 0, pushed.output
    desired = DesiredLRP.model_validate(json.loads(pushed.stdout))
    assert (desired.process_guid, desired.instances, desired.memory_mb, desired.disk_mb) == (name, 2, 64, 32)
    assert desired.placement_tags == ["blue"] and desired.env == {"A": "1"}
    assert desired.health_check.type == "process" and desired.command == [sys.executable, "-c", "print(1)"]

    # Pushed again, changed: a new version (no reps here: the rollout is left running, --no-wait).
    again = bbs.vendue("push", name, "-i", "2", "-m", "64", "-d", "32", "--tag", "blue", "--env", "A=1",
                       "--health", "process", "--no-wait", "--", sys.executable, "-c", "print(2)")
    assert again.exit_code == 0, again.output
    assert again.stdout.strip().startswith(f"{name}: rolling out version 2 (command)"), again.stdout

    apps = bbs.vendue("apps", "--json")
    assert apps.exit_code == 0, apps.output
    row = next(r for r in json.loads(apps.stdout) if r["process_guid"] == name)
    assert row["instances"] == 2 and row["running"] == 0 and row["memory_mb"] == 64
    assert set(row) >= {"process_guid", "instances", "running", "starting", "crashed", "placement_errors"}

    listed = bbs.vendue("instances", name, "--json")
    assert listed.exit_code == 0, listed.output
    actuals = [ActualLRP.model_validate(a) for a in json.loads(listed.stdout)]
    assert [(a.process_guid, a.index, a.state) for a in actuals] == [
        (name, 0, "UNCLAIMED"),
        (name, 1, "UNCLAIMED"),
    ]

    table = bbs.vendue("instances", name)
    assert table.exit_code == 0 and "UNCLAIMED" in table.stdout and "INDEX" in table.stdout
    assert "VER" in table.stdout

    scaled = bbs.vendue("scale", name, "-i", "3", "--json")
    assert scaled.exit_code == 0 and json.loads(scaled.stdout)["instances"] == 3
    assert json.loads(scaled.stdout)["on_cell_loss"] == "reschedule"  # Diego's, unless asked otherwise
    kept = bbs.vendue("scale", name, "--on-cell-loss", "keep-replicas", "--json")
    assert kept.exit_code == 0, kept.output
    changed = json.loads(kept.stdout)
    assert (changed["instances"], changed["on_cell_loss"]) == (3, "keep-replicas")
    policy = bbs.vendue("push", unique("db"), "--on-cell-loss", "keep-replicas", "--json", "--", "x")
    assert policy.exit_code == 0, policy.output
    assert json.loads(policy.stdout)["on_cell_loss"] == "keep-replicas"

    deleted = bbs.vendue("delete", name, "--json")
    assert (deleted.exit_code, json.loads(deleted.stdout)) == (0, {"process_guid": name, "deleted": True})
    assert name not in desired_guids(bbs)
    missing = bbs.vendue("delete", name)
    assert missing.exit_code == 1 and missing.stderr.strip() == f"error: no app named '{name}'"
    assert bbs.vendue("instances", name).exit_code == 1


def test_task_run_detached_and_tasks_json(bbs):
    guid = unique("job")
    run = bbs.vendue("task", "run", "--detach", "--name", guid, "-m", "32", "--json", "--", "echo", "hi")
    assert run.exit_code == 0, run.output
    task = Task.model_validate(json.loads(run.stdout))
    assert (task.task_guid, task.state, task.memory_mb, task.command) == (guid, "PENDING", 32, ["echo", "hi"])

    listed = bbs.vendue("tasks", "--json")
    assert listed.exit_code == 0, listed.output
    assert guid in {Task.model_validate(t).task_guid for t in json.loads(listed.stdout)}
    assert guid in bbs.vendue("tasks").stdout

    cancelled = bbs.vendue("task", "cancel", guid, "--json")
    assert (cancelled.exit_code, json.loads(cancelled.stdout)) == (0, {"task_guid": guid, "cancelled": True})
    assert bbs.http.get(f"/v1/tasks/{guid}").json()["failed"] is True
    deleted = bbs.vendue("task", "delete", guid)
    assert (deleted.exit_code, deleted.stdout) == (0, f"deleted {guid}\n"), deleted.output
    assert guid not in task_guids(bbs)


@pytest.mark.timeout(180)
def test_cells_fit_a_real_terminal_of_80_100_and_120_columns_names_whole(bbs):
    cell_id = unique("cell-zone-a-rack-7")  # a long name: the one column never cut
    presence = {
        "cell_id": cell_id, "zone": "z1", "rep_url": f"https://127.0.0.1:{free_port()}/a/long/rep/path",
        "total": {"memory_mb": 16384, "disk_mb": 65536, "containers": 256},
        "available": {"memory_mb": 8192, "disk_mb": 32768, "containers": 200},
        "isolation": "cgroup-v2 disk:ext4",
    }
    issue(bbs.pki, role="rep", name=cell_id, cells=[cell_id])
    rep = client_context(TLSFiles.in_dir(bbs.pki, cell_id))
    assert httpx.put(f"{bbs.url}/v1/cells", json={"cells": [presence]}, verify=rep).status_code == 200
    env = {**os.environ, "VENDUE_BBS_URL": bbs.url, **bbs.tls_env(), "TERM": "xterm", "NO_COLOR": "1"}
    env.pop("VENDUE_TOKEN", None)
    for columns in (80, 100, 120):
        # --all: listed even if its presence expired meanwhile (a loaded machine: no heartbeat follows).
        code, lines = run_in_terminal([*ENTRY_POINT, "cells", "--all"], env, columns, cwd=str(PROJECT_ROOT))
        shown = "\n".join(lines)
        assert code == 0, shown
        assert any(cell_id in line for line in lines), f"{cell_id} not whole at {columns} columns:\n{shown}"
        assert max(len(line.rstrip()) for line in lines) <= columns, f"wider than {columns}:\n{shown}"
        assert "…" in shown or "-o wide" in shown, f"nothing shortened at {columns}?\n{shown}"
    wide = [*ENTRY_POINT, "cells", "--all", "-o", "wide"]
    code, lines = run_in_terminal(wide, env, 80, cwd=str(PROJECT_ROOT))
    assert code == 0 and any(presence["rep_url"] in line for line in lines), "\n".join(lines)


def test_cells_lists_the_cell_states_from_the_bbs_alone(bbs):
    cell_id = unique("cell")
    # Its rep_url answers nothing: every column comes from the heartbeat the BBS keeps.
    presence = {
        "cell_id": cell_id,
        "zone": "z9",
        "rep_url": f"https://127.0.0.1:{free_port()}",
        "total": {"memory_mb": 1024, "disk_mb": 2048, "containers": 10},
        "available": {"memory_mb": 768, "disk_mb": 1536, "containers": 7},
        "instances": 3,
        "starting": 1,
    }
    issue(bbs.pki, role="rep", name=cell_id, cells=[cell_id])  # only the cell's rep may heartbeat for it
    rep = client_context(TLSFiles.in_dir(bbs.pki, cell_id))
    assert httpx.put(f"{bbs.url}/v1/cells", json={"cells": [presence]}, verify=rep).status_code == 200
    listed = bbs.vendue("cells", "--json")
    assert listed.exit_code == 0, listed.output
    cells = {c.cell_id: c for c in (CellPresence.model_validate(c) for c in json.loads(listed.stdout))}
    assert cells[cell_id].zone == "z9" and cells[cell_id].total.memory_mb == 1024
    assert cells[cell_id].available.model_dump() == presence["available"] and cells[cell_id].instances == 3
    table = bbs.vendue("cells")
    row = next(line for line in table.stdout.splitlines() if cell_id in line)
    assert table.exit_code == 0 and "768 / 1024 MB" in row and "7 / 10" in row and "present" in row, (
        table.stdout
    )
    # cordon, drain and uncordon: the state the BBS answers, in the listing too; an unknown cell: exit 1.
    assert "CORDONED" in bbs.vendue("cells", "cordon", cell_id).stdout
    assert json.loads(bbs.vendue("cells", "drain", cell_id, "--json").stdout)["draining"] is True
    assert "DRAINING" in next(line for line in bbs.vendue("cells").stdout.splitlines() if cell_id in line)
    uncordoned = bbs.vendue("cells", "uncordon", cell_id, "--json")
    assert uncordoned.exit_code == 0 and json.loads(uncordoned.stdout)["cordoned"] is False, uncordoned.output
    for mode in ("cordon", "uncordon", "drain"):
        unknown = bbs.vendue("cells", mode, "no-such-cell")
        assert (unknown.exit_code, unknown.stderr.strip()) == (1, "error: no cell named 'no-such-cell'")
    bad = bbs.vendue("cells", "drain", cell_id, "--wait", "--timeout", "0")
    assert (bad.exit_code, bad.stderr.strip()) == (2, "error: --timeout: must be greater than 0, got 0")
    empty = bbs.vendue("cells", "drain", cell_id, "--wait", "--timeout", "5")
    assert empty.exit_code == 0 and f"drained {cell_id}" in empty.stdout, empty.output
    bbs.vendue("cells", "uncordon", cell_id)
    # `cells remove` forgets a cell that is gone; one that heartbeats is refused, an unknown one is not found.
    present = bbs.vendue("cells", "remove", cell_id)
    assert present.exit_code == 1 and f"cell '{cell_id}' is present" in present.stderr, present.output
    assert cell_id in {c["cell_id"] for c in json.loads(bbs.vendue("cells", "--json").stdout)}
    unknown = bbs.vendue("cells", "remove", "no-such-cell")
    assert unknown.exit_code == 1, unknown.output
    assert unknown.stderr.strip() == "error: no cell named 'no-such-cell'"


def test_events_json_prints_one_event_per_line(bbs, tmp_path: Path):
    # A real subprocess: `vendue events` follows the stream until it is stopped.
    proc = subprocess.Popen(
        [*ENTRY_POINT, "events", "--json", "--type", "task_created", "--bbs", bbs.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
        preexec_fn=child_preexec(),
        env={**os.environ, **bbs.tls_env()},
    )
    try:
        name = unique("evt")
        attempts = itertools.count()

        def a_change_then_its_line() -> str:
            bbs.http.post("/v1/tasks", json={"task_guid": f"{name}-{next(attempts)}", "command": ["x"]})
            return _read_line(proc, timeout=0.5)

        def stderr() -> str:
            assert proc.stderr is not None
            return f"no line; stderr: {proc.stderr.read() if proc.poll() is not None else 'still running'}"

        # The stream may connect after our first change: keep changing until an event of ours arrives.
        line = wait_for(a_change_then_its_line, 25.0, "an event line from `vendue events --json`", stderr,
                        interval=0)
        event = Event.model_validate(json.loads(line))
        assert event.type == "task_created" and event.data["task_guid"].startswith(name), event
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


def test_a_role_that_may_not_is_one_error_line_exit_1_and_nothing_written(bbs):
    name = unique("refused")
    result = bbs.vendue("push", name, "--", "x", env=bbs.tls_env("viewer"))
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: 403: role reader (viewer) may not POST /v1/desired_lrps: only admin"), line
    assert name not in desired_guids(bbs)
    assert bbs.vendue("apps", "--json", env=bbs.tls_env("viewer")).exit_code == 0, "a reader may read"


def test_no_identity_is_one_error_line_401_and_half_given_flags_exit_2(bbs):
    ca_only = {"VENDUE_TLS_CERT": None, "VENDUE_TLS_KEY": None}
    result = bbs.vendue("apps", env=ca_only)
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: 401: "), line
    half = bbs.vendue("apps", env={"VENDUE_TLS_KEY": None})
    assert half.exit_code == 2 and half.stderr.splitlines() == [
        "error: --tls-key: --tls-cert, --tls-key and --tls-ca go together"], half.stderr
    # Without the cluster's CA the BBS's certificate is not trusted: one line that says where to look.
    untrusted = bbs.vendue(
        "apps", env={"VENDUE_TLS_CERT": None, "VENDUE_TLS_KEY": None, "VENDUE_TLS_CA": None}
    )
    assert untrusted.exit_code == 1, untrusted.output
    [line] = untrusted.stderr.splitlines()
    assert "CERTIFICATE_VERIFY_FAILED" in line and "--tls-ca" in line, line


def test_a_bearer_token_needs_only_the_ca(bbs):
    created = bbs.http.post("/v1/tokens", json={"role": "reader", "name": "script"})
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    as_token = {"VENDUE_TLS_CERT": None, "VENDUE_TLS_KEY": None}
    listed = bbs.vendue("apps", "--json", "--token", token, env=as_token)
    assert listed.exit_code == 0, listed.output
    name = unique("by-token")
    refused = bbs.vendue("push", name, "--", "x", env={**as_token, "VENDUE_TOKEN": token})
    assert refused.exit_code == 1 and refused.stderr.startswith("error: 403: role reader (script)"), (
        refused.output
    )
    bad = bbs.vendue("apps", "--token", "not-a-token", env=as_token)
    assert bad.exit_code == 1 and bad.stderr.startswith("error: 401: "), bad.output


def test_push_sets_every_field_of_the_health_check_and_the_defaults_stay_diegos(bbs):
    name = unique("checked")
    pushed = bbs.vendue("push", name, "--health", "http", "--health-path", "/ready", "--health-interval", "5",
                        "--health-timeout", "2", "--health-threshold", "3", "--health-start-timeout", "90",
                        "--json", "--", "x")
    assert pushed.exit_code == 0, pushed.output
    check = DesiredLRP.model_validate(json.loads(pushed.stdout)).health_check
    assert (check.type, check.path, check.interval_s, check.invocation_timeout_s, check.failure_threshold,
            check.timeout_s) == ("http", "/ready", 5, 2, 3, 90)
    plain = bbs.vendue("push", unique("plain"), "--health-threshold", "2", "--json", "--", "x")
    check = DesiredLRP.model_validate(json.loads(plain.stdout)).health_check
    assert (check.type, check.interval_s, check.invocation_timeout_s, check.failure_threshold,
            check.timeout_s) == ("port", 30, 1, 2, 60)


def test_the_instances_table_shows_the_version_each_instance_runs() -> None:
    import io
    from datetime import UTC, datetime

    from .client_cmd import instances_table
    from .terminal_text import safe_console

    rows = [ActualLRP(process_guid="web", index=i, state="RUNNING", since=datetime.now(UTC), version=v,
                      modification_tag={"epoch": "e", "index": 0}) for i, v in ((0, 7), (1, 6))]
    out = safe_console(width=200, file=io.StringIO())
    out.print(instances_table(rows, "web"))
    lines = out.file.getvalue().splitlines()
    header = next(line for line in lines if "INDEX" in line)
    assert [part.strip() for part in header.split("┃")[1:3]] == ["INDEX", "VER"], header
    cells = [[part.strip() for part in line.split("│")[1:3]] for line in lines if line.startswith("│")]
    assert cells == [["0", "7"], ["1", "6"]], lines
