"""Cloud Foundry's own operator CLI, the real `cfdot`, drives a `vendue up` cluster through the BBS's Diego
API (bbs/diego, docs/diego-api.md): every command's JSON checked against what Vendue's own API says.
Skipped, saying why, where the cfdot binary is absent (tests/support/diego.py)."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from common.tls import TLSFiles
from tests.support.diego import CFDOT, cfdot, json_lines
from tests.support.polling import expect, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not CFDOT.is_file(),
                       reason=f"cfdot is not at {CFDOT} (shared/tools beside the repository)"),
    # Diego's API is HTTP whatever carries the auctions: one transport is enough here.
    pytest.mark.parametrize("module_cluster", ["http"], indirect=True),
]
CLUSTER = {"cells": 2, "zones": 2}
SERVER = "exec python3 -m http.server --bind 127.0.0.1 $PORT"
DEADLINE_S = 60.0


def cf_guid() -> str:
    """Cloud Controller's process guid: the app's guid, '-', the version's."""
    return f"{uuid.uuid4()}-{uuid.uuid4()}"


@pytest.fixture
def cf(module_cluster: Any) -> tuple[str, TLSFiles]:
    """The Diego API's URL and a certificate of the role cf (Cloud Foundry's components)."""
    lc = module_cluster.lc
    assert lc.diego_url.startswith("https://"), lc.diego_url
    return lc.diego_url, lc.issue_certificate("cf", "cfdot")


@pytest.fixture
def vendue(module_cluster: Any) -> Iterator[httpx.Client]:
    """Vendue's own API, as its admin."""
    lc = module_cluster.lc
    with lc.http_client(base_url=lc.bbs_url, timeout=10.0) as client:
        yield client


def items(client: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    answer = client.get(path, params=params)
    assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text}"
    return list(answer.json()["items"])


def lrp_spec(guid: str, instances: int, **fields: Any) -> dict[str, Any]:
    return {
        "process_guid": guid, "domain": "cf-apps", "rootfs": "preloaded:cflinuxfs4", "instances": instances,
        "memory_mb": 64, "disk_mb": 64, "ports": [8080],
        "action": {"run": {"path": "sh", "args": ["-c", SERVER], "user": "vcap",
                           "env": [{"name": "GREETING", "value": "hi"}]}},
        "routes": {"cf-router": [{"hostnames": ["web.example.com"], "port": 8080}]},
        "log_guid": guid[:36], "metrics_guid": guid[:36], "annotation": "etag-1", **fields,
    }


def running(vendue: httpx.Client, guid: str, count: int) -> list[dict[str, Any]]:
    rows = items(vendue, "/v1/actual_lrps", process_guid=guid)
    up = sorted((r for r in rows if r["state"] == "RUNNING"), key=lambda r: r["index"])
    return expect(len(up) == count and up, [(r["index"], r["state"], r["placement_error"]) for r in rows])


def test_cells_cell_states_and_domains(cf: tuple[str, TLSFiles], vendue: httpx.Client) -> None:
    url, files = cf
    own = {c["cell_id"]: c for c in items(vendue, "/v1/cells")}
    cells = {c["cell_id"]: c for c in json_lines(cfdot(url, files, "cells").stdout)}
    assert set(cells) == set(own), f"expected cfdot's cells to be Vendue's {sorted(own)}, saw {sorted(cells)}"
    for cell_id, cell in cells.items():
        assert cell["zone"] == own[cell_id]["zone"]
        assert cell["capacity"]["memory_mb"] == own[cell_id]["total"]["memory_mb"], cell
        assert cell["rep_url"].endswith(f"/v1/diego/cells/{cell_id}"), cell
    states = {s["cell_id"]: s for s in json_lines(cfdot(url, files, "cell-states").stdout)}
    assert set(states) == set(own), f"expected a state for each of {sorted(own)}, saw {sorted(states)}"
    for cell_id, state in states.items():
        assert state["TotalResources"]["MemoryMB"] == own[cell_id]["total"]["memory_mb"], state
        assert state["Zone"] == own[cell_id]["zone"], state

    assert "cf-apps" not in cfdot(url, files, "domains").stdout
    cfdot(url, files, "set-domain", "cf-apps", "--ttl", "1h")
    domains = [json.loads(line) for line in cfdot(url, files, "domains").stdout.split()]
    assert "cf-apps" in domains, f"expected cf-apps among the fresh domains, saw {domains}"


def test_an_lrp_desired_updated_retired_and_deleted_with_cfdot(
    cf: tuple[str, TLSFiles], vendue: httpx.Client, tmp_path: Any, module_cluster: Any
) -> None:
    url, files = cf
    guid = cf_guid()
    spec = tmp_path / "lrp.json"
    spec.write_text(json.dumps(lrp_spec(guid, 2)))
    cfdot(url, files, "create-desired-lrp", f"@{spec}")
    up = wait_for(lambda: running(vendue, guid, 2), DEADLINE_S, f"2 instances of {guid} running")
    for row in up:  # it runs: each instance answers HTTP on its address
        assert httpx.get(f"http://{row['address']}/", timeout=5.0).status_code == 200, row

    # Reads agree with Vendue's own API, and return what was desired unchanged.
    [own] = [d for d in items(vendue, "/v1/desired_lrps") if d["process_guid"] == guid]
    [lrp] = [d for d in json_lines(cfdot(url, files, "desired-lrps").stdout) if d["process_guid"] == guid]
    assert lrp == json_lines(cfdot(url, files, "desired-lrp", guid).stdout)[0]
    assert (lrp["instances"], lrp["memory_mb"]) == (own["instances"], own["memory_mb"]), lrp
    assert lrp["domain"] == own["domain"] == "cf-apps", lrp
    assert lrp["action"]["run"]["args"] == ["-c", SERVER] and own["command"] == ["sh", "-c", SERVER]
    assert lrp["action"]["run"]["env"] == [{"name": "GREETING", "value": "hi"}], lrp["action"]
    assert own["env"] == {"GREETING": "hi"}, own
    assert lrp["routes"] == {"cf-router": [{"hostnames": ["web.example.com"], "port": 8080}]}, lrp["routes"]
    assert (lrp["annotation"], lrp["log_guid"], lrp["metrics_guid"]) == ("etag-1", guid[:36], guid[:36])
    assert lrp["modification_tag"] == own["modification_tag"], (lrp, own)
    [info] = [i for i in json_lines(cfdot(url, files, "desired-lrp-scheduling-infos").stdout)
              if i["process_guid"] == guid]
    assert (info["instances"], info["annotation"], info["memory_mb"]) == (2, "etag-1", 64), info

    actual = json_lines(cfdot(url, files, "actual-lrps", "-p", guid).stdout)
    assert sorted((a["index"], a["instance_guid"], a["cell_id"], a["state"]) for a in actual) == sorted(
        (r["index"], r["instance_guid"], r["cell_id"], r["state"]) for r in items(
            vendue, "/v1/actual_lrps", process_guid=guid)), actual
    assert all(a["domain"] == "cf-apps" and a["OptionalRoutable"]["routable"] for a in actual), actual
    # and `vendue instances` says the same
    shown = module_cluster.cli("instances", guid, "--json")
    assert shown.code == 0, shown.output
    rows = json.loads(shown.stdout)
    rows = rows["items"] if isinstance(rows, dict) else rows
    assert sorted((r["index"], r["instance_guid"]) for r in rows) == sorted(
        (a["index"], a["instance_guid"]) for a in actual), (rows, actual)
    one = json_lines(cfdot(url, files, "actual-lrps", "-p", guid, "-i", "1").stdout)
    assert [a["index"] for a in one] == [1], one
    cell = up[0]["cell_id"]
    on_cell = json_lines(cfdot(url, files, "actual-lrps", "-c", cell, "-d", "cf-apps").stdout)
    assert {a["cell_id"] for a in on_cell} == {cell} and guid in {a["process_guid"] for a in on_cell}, on_cell
    assert json_lines(cfdot(url, files, "actual-lrps", "-d", "no-such-domain").stdout) == []

    # update: instances, routes, annotation; nothing else changes
    update = tmp_path / "update.json"
    routes = {"cf-router": [{"hostnames": ["two.example.com"], "port": 8080}]}
    update.write_text(json.dumps({"instances": 3, "annotation": "etag-2", "routes": routes}))
    cfdot(url, files, "update-desired-lrp", guid, f"@{update}")
    wait_for(lambda: running(vendue, guid, 3), DEADLINE_S, f"3 instances of {guid} running")
    after = json_lines(cfdot(url, files, "desired-lrp", guid).stdout)[0]
    assert (after["instances"], after["annotation"]) == (3, "etag-2"), after
    assert after["routes"]["cf-router"][0]["hostnames"] == ["two.example.com"], after["routes"]
    assert after["action"] == lrp["action"] and after["log_guid"] == lrp["log_guid"]

    # retire: a new instance replaces index 0
    before = {r["index"]: r["instance_guid"] for r in running(vendue, guid, 3)}
    cfdot(url, files, "retire-actual-lrp", guid, "0")
    def replaced() -> bool:
        now = {r["index"]: r["instance_guid"] for r in running(vendue, guid, 3)}
        return expect(now[0] != before[0], now)

    wait_for(replaced, DEADLINE_S, "index 0 replaced by a new running instance")

    cfdot(url, files, "delete-desired-lrp", guid)
    assert guid not in {d["process_guid"] for d in items(vendue, "/v1/desired_lrps")}
    gone = cfdot(url, files, "desired-lrp", guid, check=False)
    assert gone.returncode != 0 and "ResourceNotFound" in gone.stderr, gone.stderr


def test_an_lrp_desired_through_vendue_reads_through_cfdot(
    cf: tuple[str, TLSFiles], vendue: httpx.Client
) -> None:
    url, files = cf
    guid = f"web-{uuid.uuid4().hex[:8]}"
    created = vendue.post("/v1/desired_lrps", json={"process_guid": guid, "instances": 1, "memory_mb": 64,
                                                    "disk_mb": 64, "command": ["sh", "-c", SERVER]})
    assert created.status_code == 201, created.text
    try:
        [lrp] = json_lines(cfdot(url, files, "desired-lrp", guid).stdout)
        assert lrp["action"]["run"]["path"] == "sh" and lrp["action"]["run"]["args"] == ["-c", SERVER], lrp
        assert (lrp["domain"], lrp["instances"], lrp["memory_mb"]) == ("vendue", 1, 64), lrp
        wait_for(lambda: running(vendue, guid, 1), DEADLINE_S, f"{guid} running")
        [actual] = json_lines(cfdot(url, files, "actual-lrps", "-p", guid).stdout)
        assert actual["state"] == "RUNNING", actual
    finally:
        vendue.delete(f"/v1/desired_lrps/{guid}")


def test_tasks_created_cancelled_and_deleted_with_cfdot(
    cf: tuple[str, TLSFiles], vendue: httpx.Client, tmp_path: Any, module_cluster: Any
) -> None:
    url, files = cf
    guid = f"task-{uuid.uuid4()}"
    spec = tmp_path / "task.json"
    spec.write_text(json.dumps({"task_guid": guid, "domain": "cf-tasks", "rootfs": "preloaded:cflinuxfs4",
                                "memory_mb": 64, "disk_mb": 64, "annotation": "note-1",
                                "action": {"run": {"path": "sh", "args": ["-c", "echo 42"],
                                                   "user": "vcap"}}}))
    cfdot(url, files, "create-task", f"@{spec}")
    def completed(task_guid: str) -> dict[str, Any]:
        found = vendue.get(f"/v1/tasks/{task_guid}").json()
        return expect(found["state"] == "COMPLETED" and found, found)

    done = wait_for(lambda: completed(guid), DEADLINE_S, f"task {guid} completed")
    [task] = json_lines(cfdot(url, files, "task", guid).stdout)
    assert (task["state"], task["failed"], task["result"], task["annotation"]) == (
        "Completed", done["failed"], done["result"], "note-1"), task
    assert guid in {t["task_guid"] for t in json_lines(cfdot(url, files, "tasks").stdout)}
    listed = module_cluster.cli("tasks", "--json")
    assert listed.code == 0, listed.output
    own_tasks = json.loads(listed.stdout)
    own_tasks = own_tasks["items"] if isinstance(own_tasks, dict) else own_tasks
    assert [t["state"] for t in own_tasks if t["task_guid"] == guid] == ["COMPLETED"], own_tasks
    cancelled = cfdot(url, files, "cancel-task", guid, check=False)
    assert cancelled.returncode != 0 and "InvalidStateTransition" in cancelled.stderr, cancelled.stderr
    cfdot(url, files, "delete-task", guid)
    assert vendue.get(f"/v1/tasks/{guid}").status_code == 404

    long = f"task-{uuid.uuid4()}"
    spec.write_text(json.dumps({"task_guid": long, "domain": "cf-tasks", "rootfs": "preloaded:cflinuxfs4",
                                "memory_mb": 64, "disk_mb": 64,
                                "action": {"run": {"path": "sleep", "args": ["600"]}}}))
    cfdot(url, files, "create-task", f"@{spec}")
    cfdot(url, files, "cancel-task", long)
    own = vendue.get(f"/v1/tasks/{long}").json()
    assert (own["state"], own["failed"]) == ("COMPLETED", True), own
    [task] = json_lines(cfdot(url, files, "task", long).stdout)
    assert (task["state"], task["failed"]) == ("Completed", True), task
    assert task["failure_reason"] == own["failure_reason"], (task, own)
    cfdot(url, files, "delete-task", long)


class Follower:
    """A cfdot event command running in the background; its JSON lines collected as they come."""

    def __init__(self, url: str, files: TLSFiles, *args: str) -> None:
        self.proc = subprocess.Popen(
            [str(CFDOT), "--bbsURL", url, "--caCertFile", str(files.ca), "--clientCertFile", str(files.cert),
             "--clientKeyFile", str(files.key), *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.lines: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))

    def types(self, guid: str) -> list[str]:
        return [e["type"] for e in list(self.lines) if guid in json.dumps(e)]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_lrp_and_task_events_with_cfdot(
    cf: tuple[str, TLSFiles], vendue: httpx.Client, tmp_path: Any
) -> None:
    url, files = cf
    lrps = Follower(url, files, "lrp-events", "--exclude-actual-lrp-groups")
    tasks = Follower(url, files, "task-events")
    probes: list[str] = []

    def subscribed(follower: Follower, kind: str, desire: Any) -> bool:
        """Desire a probe (a new guid each look) until `follower` sees its `kind` event: then it follows."""
        probe = desire()
        probes.append(probe)
        return expect(any(kind in follower.types(p) for p in probes), follower.lines[-3:])

    def probe_lrp() -> str:
        guid = cf_guid()
        spec.write_text(json.dumps(lrp_spec(guid, 0)))
        cfdot(url, files, "create-desired-lrp", f"@{spec}")
        return guid

    def probe_task() -> str:
        guid = f"probe-{uuid.uuid4()}"
        spec.write_text(json.dumps({"task_guid": guid, "domain": "cf-tasks", "memory_mb": 64, "disk_mb": 64,
                                    "action": {"run": {"path": "true"}}}))
        cfdot(url, files, "create-task", f"@{spec}")
        return guid

    spec = tmp_path / "spec.json"
    try:
        wait_for(lambda: subscribed(lrps, "desired_lrp_created", probe_lrp), DEADLINE_S,
                 "cfdot lrp-events following", interval=1.0)
        wait_for(lambda: subscribed(tasks, "task_created", probe_task), DEADLINE_S,
                 "cfdot task-events following", interval=1.0)
        guid = cf_guid()
        spec.write_text(json.dumps(lrp_spec(guid, 1)))
        cfdot(url, files, "create-desired-lrp", f"@{spec}")
        wait_for(lambda: running(vendue, guid, 1), DEADLINE_S, f"{guid} running")
        cfdot(url, files, "delete-desired-lrp", guid)
        wanted = ["desired_lrp_created", "actual_lrp_instance_created", "actual_lrp_instance_changed",
                  "desired_lrp_removed", "actual_lrp_instance_removed"]
        wait_for(lambda: expect(set(wanted) <= set(lrps.types(guid)), lrps.types(guid)), DEADLINE_S,
                 f"cfdot lrp-events: {wanted}")
        [created] = [e for e in lrps.lines if e["type"] == "desired_lrp_created" and guid in json.dumps(e)]
        assert created["data"]["desired_lrp"]["routes"] == lrp_spec(guid, 1)["routes"], created
        masked = [{"name": "GREETING", "value": "***"}]  # env values never travel in events
        assert created["data"]["desired_lrp"]["action"]["run"]["env"] == masked, created

        task = f"task-{uuid.uuid4()}"
        spec.write_text(json.dumps({"task_guid": task, "domain": "cf-tasks", "rootfs": "preloaded:cflinuxfs4",
                                    "memory_mb": 64, "disk_mb": 64,
                                    "action": {"run": {"path": "true"}}}))
        cfdot(url, files, "create-task", f"@{spec}")
        wait_for(lambda: expect({"task_created", "task_changed"} <= set(tasks.types(task)),
                                tasks.types(task)),
                 DEADLINE_S, "cfdot task-events: task_created and task_changed")
        wait_for(lambda: expect(vendue.get(f"/v1/tasks/{task}").json()["state"] == "COMPLETED", task),
                 DEADLINE_S, f"task {task} completed")
        cfdot(url, files, "delete-task", task)
        wait_for(lambda: expect("task_removed" in tasks.types(task), tasks.types(task)), DEADLINE_S,
                 "cfdot task-events: task_removed")
    finally:
        for probe in probes:
            cfdot(url, files, "delete-desired-lrp", probe, check=False)
        lrps.stop()
        tasks.stop()
