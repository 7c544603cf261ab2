"""End to end: bad input is a 422 naming the field (API) or one line and exit status 2 (CLI), and writes
nothing."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from common.procutil import app_python

from .conftest import APP_COMMAND, E2ECluster

pytestmark = [pytest.mark.e2e]

# One cluster per transport for the module (conftest's module_cluster): bad input writes nothing, which
# each test checks, so the tests cannot disturb one another.
CLUSTER = {"cells": 1, "zones": 1}

VALID_LRP = {"process_guid": "fine-app", "instances": 0, "command": APP_COMMAND, "memory_mb": 64}
DIGEST = "sha256:" + "0" * 64
VALID_TASK = {"task_guid": "fine-task", "command": [app_python(), "-c", "pass"], "memory_mb": 64}

# (what is wrong, body, the field the 422 must name)
BAD_LRPS = [
    ("negative memory", {**VALID_LRP, "process_guid": "neg-mem", "memory_mb": -512}, "memory_mb"),
    ("absurd memory", {**VALID_LRP, "process_guid": "big-mem", "memory_mb": 10**12}, "memory_mb"),
    ("zero disk", {**VALID_LRP, "process_guid": "no-disk", "disk_mb": 0}, "disk_mb"),
    ("too many instances", {**VALID_LRP, "process_guid": "many", "instances": 10_001}, "instances"),
    ("negative instances", {**VALID_LRP, "process_guid": "fewer", "instances": -1}, "instances"),
    ("invalid name", {**VALID_LRP, "process_guid": "no spaces/allowed!"}, "process_guid"),
    ("name too long", {**VALID_LRP, "process_guid": "a" * 200}, "process_guid"),
    ("unknown field", {**VALID_LRP, "process_guid": "typo", "memroy_mb": 64}, "memroy_mb"),
    (
        "unknown nested field",
        {**VALID_LRP, "process_guid": "typo2", "health_check": {"kind": "port"}},
        "kind",
    ),
    ("port out of range", {**VALID_LRP, "process_guid": "port", "ports": [70000]}, "ports"),
    ("wrong type", {**VALID_LRP, "process_guid": "typed", "instances": "three"}, "instances"),
    ("bad env name", {**VALID_LRP, "process_guid": "envy", "env": {"A=B": "1"}}, "env"),
    ("missing name", {k: v for k, v in VALID_LRP.items() if k != "process_guid"}, "process_guid"),
    ("artifact leaving the directory", {**VALID_LRP, "process_guid": "art-dest",
                                        "artifacts": [{"digest": DIGEST, "dest": "../etc"}]}, "dest"),
    ("artifact digest", {**VALID_LRP, "process_guid": "art-digest",
                         "artifacts": [{"digest": "sha256:XYZ"}]}, "digest"),
    ("artifact from a metadata service", {**VALID_LRP, "process_guid": "art-url", "artifacts": [
        {"digest": DIGEST, "url": "http://169.254.169.254/latest/user-data"}]}, "url"),
    ("too many artifacts", {**VALID_LRP, "process_guid": "art-many",
                            "artifacts": [{"digest": DIGEST}] * 17}, "artifacts"),
]
BAD_TASKS = [
    ("empty command", {**VALID_TASK, "task_guid": "t-empty", "command": []}, "command"),
    ("zero memory", {**VALID_TASK, "task_guid": "t-zero", "memory_mb": 0}, "memory_mb"),
    ("invalid guid", {**VALID_TASK, "task_guid": "-starts-with-dash"}, "task_guid"),
    ("unknown field", {**VALID_TASK, "task_guid": "t-typo", "comand": ["true"]}, "comand"),
    ("artifact at an absolute path", {**VALID_TASK, "task_guid": "t-art",
                                      "artifacts": [{"digest": DIGEST, "dest": "/usr/bin"}]}, "dest"),
]


@pytest.fixture(scope="module")
def fine_app(module_cluster: E2ECluster) -> dict:
    """The valid app the bad updates and the CLI's bad `scale` commands aim at, created once per cluster."""
    r = module_cluster.bbs.http.post("/v1/desired_lrps", json=VALID_LRP)
    assert r.status_code == 201, (
        f"expected 201 creating {VALID_LRP['process_guid']}, saw {r.status_code}: {r.text}"
    )
    return r.json()


def names_field(response, field: str) -> bool:
    detail = response.json().get("detail")
    if not isinstance(detail, list):
        return False
    return any(field in [str(p) for p in err.get("loc", [])] for err in detail)


def snapshot(c) -> tuple:
    """Everything a bad request could have written: desired LRPs, actual LRPs, tasks."""
    desired = sorted((d["process_guid"], d["instances"], json.dumps(d["modification_tag"], sort_keys=True))
                     for d in c.bbs.desired())
    actual = sorted((a["process_guid"], a["index"], a["state"]) for a in c.bbs.actuals())
    tasks = sorted((t["task_guid"], t["state"]) for t in c.bbs.tasks())
    return desired, actual, tasks


@pytest.mark.timeout(180)
def test_bad_input_is_rejected_naming_the_field_and_writes_nothing(shared_cluster, fine_app):
    c = shared_cluster
    http = c.bbs.http
    before = snapshot(c)

    problems = []
    for what, body, field in BAD_LRPS:
        r = http.post("/v1/desired_lrps", json=body)
        if r.status_code != 422 or not names_field(r, field):
            problems.append(
                f"desired LRP with {what}: expected 422 naming {field!r}, saw {r.status_code} {r.text}"
            )
    for what, body, field in BAD_TASKS:
        r = http.post("/v1/tasks", json=body)
        if r.status_code != 422 or not names_field(r, field):
            problems.append(f"task with {what}: expected 422 naming {field!r}, saw {r.status_code} {r.text}")
    for what, body, field in [
        ("negative instances", {"instances": -3}, "instances"),
        ("too many instances", {"instances": 20_000}, "instances"),
        ("unknown field", {"instancez": 2}, "instancez"),
    ]:
        r = http.patch(f"/v1/desired_lrps/{VALID_LRP['process_guid']}", json=body)
        if r.status_code != 422 or not names_field(r, field):
            problems.append(
                f"update with {what}: expected 422 naming {field!r}, saw {r.status_code} {r.text}"
            )
    for path in ("/v1/desired_lrps", "/v1/tasks"):
        r = http.post(path, content=b'{"process_guid": "half', headers={"content-type": "application/json"})
        if r.status_code != 422 or not names_field(r, "body"):
            problems.append(f"POST {path} with a body that is not JSON: expected 422 naming the body, "
                            f"saw {r.status_code} {r.text}")
        r = http.post(path, json=["not", "an", "object"])
        if r.status_code != 422:
            problems.append(f"POST {path} with a JSON list: expected 422, saw {r.status_code} {r.text}")

    assert not problems, "\n".join(problems)
    assert snapshot(c) == before, (
        f"expected nothing written by bad requests; before {before}, after {snapshot(c)}"
    )


CLI_CASES = [
    ("negative memory", ["push", "cli-neg", "--memory", "-5", "--", *APP_COMMAND], "memory"),
    ("absurd memory", ["push", "cli-big", "--memory", "99999999999", "--", *APP_COMMAND], "memory"),
    ("too many instances", ["push", "cli-many", "--instances", "10001", "--", *APP_COMMAND], "instances"),
    ("invalid name", ["push", "bad name!", "--", *APP_COMMAND], "process_guid"),
    ("scale to a negative count", ["scale", "fine-app", "--instances", "-1"], "instances"),
    ("scale to too many", ["scale", "fine-app", "--instances", "10001"], "instances"),
    ("task without memory", ["task", "run", "--name", "cli-task", "--memory", "0", "--", "true"], "memory"),
    ("task with an invalid name", ["task", "run", "--name", "bad name", "--", "true"], "task_guid"),
    ("bad env", ["push", "cli-env", "--env", "NOEQUALS", "--", *APP_COMMAND], "env"),
]


@pytest.mark.timeout(180)
def test_cli_rejects_bad_input_with_one_line_and_exit_status_2(shared_cluster, fine_app):
    c = shared_cluster
    before = snapshot(c)

    # One `vendue` process per case, two at a time (CI has two cores): each is mostly an interpreter
    # start-up, and none of them writes.
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda case: c.cli(*case[1]), CLI_CASES))
    problems = []
    for (what, args, field), r in zip(CLI_CASES, results, strict=True):
        lines = [line for line in r.output.splitlines() if line.strip()]
        if r.code != 2 or len(lines) != 1 or field not in lines[0]:
            problems.append(
                f"`vendue {' '.join(args[:3])} ...` ({what}): expected exit 2 and one line naming "
                f"{field!r}, saw exit {r.code} and {len(lines)} lines: {r.output!r}"
            )
    assert not problems, "\n".join(problems)
    assert snapshot(c) == before, (
        f"expected nothing written by bad commands; before {before}, after {snapshot(c)}"
    )
