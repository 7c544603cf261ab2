"""End to end: one-off tasks on a real cluster."""

from __future__ import annotations

import json

import pytest

from common.procutil import app_python

from .conftest import Unmet, wait_for

pytestmark = [pytest.mark.e2e]

# One cluster per transport for the module (conftest's module_cluster): each task has a guid of its own
# and nothing is killed or restarted, so the tests cannot disturb one another.
CLUSTER = {"cells": 2, "zones": 1, "cell_memory_mb": 4096}


def completed(c, task_guid: str) -> dict:
    task = c.bbs.task(task_guid)
    if task["state"] not in ("COMPLETED", "RESOLVING"):
        raise Unmet(f"{task_guid}: state {task['state']}, rejection_count {task['rejection_count']}, "
                    f"failure_reason {task['failure_reason']!r}")
    return task


@pytest.mark.timeout(120)
def test_task_returns_exit_status_and_output(shared_cluster):
    c = shared_cluster
    ok = c.guid("hello-task")
    r = c.cli(
        "task",
        "run",
        "--name",
        ok,
        "--memory",
        "64",
        "--disk",
        "64",
        "--",
        app_python(),
        "-c",
        "import os; print('hello from', os.environ.get('CELL_ID', '?')); print('x' * 5000); print('tail-ok')",
    )
    assert r.code == 0, f"expected `vendue task run` to succeed, saw exit {r.code}: {r.output}"
    assert f"task {ok} succeeded" in r.stdout and "exit status 0" in r.stdout and "tail-ok" in r.stdout, (
        f"expected `vendue task run` to wait and print the outcome and output, saw:\n{r.stdout}")

    task = wait_for(lambda: completed(c, ok), 30.0, f"task {ok} COMPLETED")
    assert task["failed"] is False, f"expected success, saw {task}"
    assert task["exit_status"] == 0, f"expected exit status 0, saw {task['exit_status']}"
    assert task["failure_reason"] == ""
    assert task["cell_id"] in c.reps, (
        f"expected the task to name the cell that ran it, saw {task['cell_id']!r}"
    )
    # result: the last 4 KiB of the output (the head of a longer output is cut off, the tail kept)
    assert task["result"].rstrip().endswith("tail-ok"), (
        f"expected the output's tail, saw {task['result'][-200:]!r}"
    )
    assert len(task["result"].encode()) <= 4096, (
        f"expected at most 4 KiB of result, saw {len(task['result'])}"
    )
    assert "hello from" not in task["result"], "the head of a >4 KiB output should have been cut off"

    r = c.cli("tasks", "--json")
    assert r.code == 0, f"expected `vendue tasks --json` to succeed, saw exit {r.code}: {r.output}"
    listed = json.loads(r.stdout)
    items = listed["items"] if isinstance(listed, dict) else listed
    mine = [t for t in items if t["task_guid"] == ok]
    assert len(mine) == 1 and mine[0]["exit_status"] == 0 and mine[0]["failed"] is False, mine


@pytest.mark.timeout(120)
def test_a_tasks_terminal_escapes_never_reach_the_operators_terminal(shared_cluster):
    c = shared_cluster
    guid = c.guid("escape-task")
    # An OSC title, a CSI clear and an 8-bit CSI, as a hostile app would print them.
    script = r"import sys; sys.stdout.write('\x1b]0;PWNED\x07\x1b[2J\u009b31mtitled\n')"
    r = c.cli("task", "run", "--name", guid, "--memory", "64", "--disk", "64", "--",
              app_python(), "-c", script)
    assert r.code == 0, f"expected the task to succeed, saw exit {r.code}: {r.output}"
    listed = c.cli("tasks")
    assert listed.code == 0, listed.output
    for output in (r.stdout, listed.stdout):
        assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output, repr(output)
    assert "\\x1b]0;PWNED\\x07" in r.stdout and "titled" in r.stdout, r.stdout  # shown, escaped
    assert "PWNED" in listed.stdout, listed.stdout
    assert completed(c, guid)["result"].startswith("\x1b]0;PWNED\x07")  # the BBS keeps what the app wrote


@pytest.mark.timeout(120)
def test_failing_task_fails_with_its_reason(shared_cluster):
    c = shared_cluster
    bad = c.guid("failing-task")
    r = c.cli("task", "run", "--name", bad, "--memory", "64", "--disk", "64", "--",
              app_python(), "-c", "import sys; print('about to fail'); sys.exit(3)")
    assert r.code == 1, f"expected `vendue task run` of a failing task to exit 1, saw {r.code}: {r.output}"
    assert f"task {bad} failed" in r.stdout, f"expected the failure in the output, saw:\n{r.stdout}"

    task = wait_for(lambda: completed(c, bad), 30.0, f"task {bad} COMPLETED")
    assert task["failed"] is True, f"expected a failed task, saw {task}"
    assert task["exit_status"] == 3, f"expected exit status 3, saw {task['exit_status']}"
    assert "3" in task["failure_reason"], (
        f"expected the reason to give the exit status, saw {task['failure_reason']!r}"
    )
    assert "about to fail" in task["result"], f"expected its output in result, saw {task['result']!r}"


@pytest.mark.timeout(120)
def test_task_no_cell_can_hold_fails_after_three_rejections(shared_cluster):
    c = shared_cluster  # cells of 4096 MB: a task of 100,000 MB fits none
    huge = c.guid("huge-task")
    c.bbs.create_task(huge, [app_python(), "-c", "print('never')"], memory_mb=100_000)

    def failed() -> dict:
        task = completed(c, huge)
        if not task["failed"]:
            raise Unmet(f"completed without failing: {task}")
        return task

    task = wait_for(failed, 60.0, f"task {huge} to fail for want of room")
    assert task["failure_reason"].startswith("insufficient resources: memory"), (
        f"expected Diego's placement error as the reason, saw {task['failure_reason']!r}")
    assert task["rejection_count"] == 3, (
        f"expected 3 rejections before failing, saw {task['rejection_count']}"
    )
    assert task["cell_id"] == "", f"expected no cell for a task that never ran, saw {task['cell_id']!r}"
