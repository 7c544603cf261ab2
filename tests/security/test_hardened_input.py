"""Hostile input against the BBS API in-process (httpx ASGITransport, authorization off as in
bbs/api_test.py), on SQLite and on PostgreSQL: each case is a 4xx naming the field (or the limit), and
writes nothing — the state before and after is compared whole. The body cap and the event stream bound
need a real server: test_limits_process.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bbs.api import create_app
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from tests.support.bbs_harness import AUCTIONEER, Recorder

BIG = 2**63  # one past SQLite's widest integer
INT32_PAST = 2**31  # one past PostgreSQL's INTEGER, the column type of indices, exit statuses, lease tokens
ALLOWED_LINK_LOCAL = "169.254.10.10"
MAX_LRPS, MAX_INSTANCES = 3, 10

LRP = {"process_guid": "web", "instances": 1, "command": ["sleep", "infinity"]}
TASK = {"task_guid": "t1", "command": ["true"]}
CELL = {"cell_id": "cell-1", "zone": "z1", "rep_url": "http://127.0.0.1:1",
        "total": {"memory_mb": 4096, "disk_mb": 8192, "containers": 100}}


@pytest.fixture
async def http(tmp_path: Path, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = BBSSettings(
        data_dir=tmp_path, database_url=database_url, auctioneer_url=AUCTIONEER, send_attempts=1, lease_ttl=1,
        max_lrps=MAX_LRPS, max_instances=MAX_INSTANCES, callback_allow=[ALLOWED_LINK_LOCAL],
    )
    outbound = httpx.AsyncClient(transport=httpx.MockTransport(Recorder().handle), timeout=5)
    async with running_bbs(settings, converge=False, client=outbound) as bbs:
        transport = httpx.ASGITransport(app=create_app(bbs, insecure=True))
        async with httpx.AsyncClient(transport=transport, base_url="http://bbs", timeout=30) as client:
            yield client


async def everything(http: httpx.AsyncClient) -> dict[str, Any]:
    """All a request could have written (the lease as it stands, or its absence)."""
    state: dict[str, Any] = {path: (await http.get(path)).json()["items"]
                             for path in ("/v1/desired_lrps", "/v1/actual_lrps", "/v1/tasks", "/v1/cells")}
    lease = await http.get("/v1/leases/auctioneer")
    state["lease"] = lease.json() if lease.status_code == 200 else lease.status_code
    return state


def names(response: httpx.Response, field: str | int) -> bool:
    """Whether a 422 locates an error at `field` (anywhere in the error's location)."""
    detail = response.json()["detail"]
    return isinstance(detail, list) and any(field in err["loc"] for err in detail)


async def refused(http: httpx.AsyncClient, method: str, path: str, field: str | int, *, status: int = 422,
                  **request: Any) -> httpx.Response:
    """Send a request that must be refused with `status` naming `field`, and check it wrote nothing."""
    before = await everything(http)
    response = await http.request(method, path, **request)
    assert response.status_code == status, (
        f"expected {status} naming {field!r}, saw {response.status_code}: {response.text[:300]}"
    )
    if status == 422:
        assert names(response, field), f"expected the 422 to name {field!r}: {response.text[:300]}"
    elif status != 400:
        assert str(field) in response.json()["detail"], (
            f"expected the {status} to name {field!r}: {response.text}"
        )
    assert await everything(http) == before, "a refused request wrote something"
    return response


# --- argv, env and commands ------------------------------------------------------------------------------

BAD_LRPS = [
    ("NUL in argv", {"command": ["sh", "-c", "echo a\0b"]}, "command"),
    ("empty program", {"command": ["", "x"]}, "command"),
    ("NUL in an env value", {"env": {"DB_PASSWORD": "se\0cret"}}, "env"),
    ("= in an env name", {"env": {"A=B": "1"}}, "env"),
    ("NUL in an env name", {"env": {"A\0": "1"}}, "env"),
    ("a 1 MB argv element", {"command": ["echo", "x" * 1_000_000]}, "command"),
    ("257 argv elements", {"command": ["echo"] * 257}, "command"),
    ("10,000 env entries", {"env": {f"V{i}": "1" for i in range(10_000)}}, "env"),
    ("a 1 MB env value", {"env": {"BIG": "x" * 1_000_000}}, "env"),
    ("100,000 placement tags", {"placement_tags": [f"t{i}" for i in range(100_000)]}, "placement_tags"),
    ("a 1 kB placement tag", {"placement_tags": ["t" * 1_000]}, "placement_tags"),
    ("NUL in the health check path", {"health_check": {"type": "http", "path": "/\0"}}, "path"),
    ("a line break in the health check path (another request)",
     {"health_check": {"type": "http", "path": "/ HTTP/1.0\r\nX-Evil: 1"}}, "path"),
    ("a health check every 0 s", {"health_check": {"interval_s": 0}}, "interval_s"),
    ("a check that may take 0 s", {"health_check": {"invocation_timeout_s": 0}}, "invocation_timeout_s"),
    ("a health check threshold of 0", {"health_check": {"failure_threshold": 0}}, "failure_threshold"),
    ("1,000 volumes", {"volumes": [{"name": f"v{i}"} for i in range(1_000)]}, "volumes"),
]


@pytest.mark.parametrize(("what", "fields", "field"), BAD_LRPS, ids=[case[0] for case in BAD_LRPS])
async def test_a_hostile_desired_lrp_is_422_naming_the_field(http: httpx.AsyncClient, what: str,
                                                             fields: dict[str, Any], field: str) -> None:
    await refused(http, "POST", "/v1/desired_lrps", field, json={**LRP, **fields})


BAD_TASKS = [
    ("empty command", {"command": []}, "command"),
    ("empty program", {"command": [""]}, "command"),
    ("NUL in argv", {"command": ["echo", "\0"]}, "command"),
    ("NUL in an env value", {"env": {"TOKEN": "a\0"}}, "env"),
    ("= in an env name", {"env": {"A=B": "1"}}, "env"),
    ("10,000 env entries", {"env": {f"V{i}": "1" for i in range(10_000)}}, "env"),
    ("100,000 placement tags", {"placement_tags": ["t"] * 100_000}, "placement_tags"),
]


@pytest.mark.parametrize(("what", "fields", "field"), BAD_TASKS, ids=[case[0] for case in BAD_TASKS])
async def test_a_hostile_task_is_422_naming_the_field(
    http: httpx.AsyncClient, what: str, fields: dict[str, Any], field: str
) -> None:
    await refused(http, "POST", "/v1/tasks", field, json={**TASK, **fields})


# --- the completion callback -----------------------------------------------------------------------------

BAD_CALLBACKS = [
    "file:///etc/passwd",
    "gopher://127.0.0.1:25/",
    "/relative/path",
    "http://",
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://169.254.1.1/",  # link-local
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.google.internal./",
    "http://2852039166/",  # 169.254.169.254 as one number, as the C resolver reads it
    "http://0xa9.0xfe.0xa9.0xfe/",
    "http://[::ffff:169.254.169.254]/",
]


@pytest.mark.parametrize("url", BAD_CALLBACKS)
async def test_a_callback_url_other_than_http_or_to_link_local_or_metadata_is_422(http: httpx.AsyncClient,
                                                                                  url: str) -> None:
    await refused(
        http, "POST", "/v1/tasks", "completion_callback_url", json={**TASK, "completion_callback_url": url}
    )


async def test_an_allowlisted_link_local_callback_and_an_ordinary_one_are_taken(
    http: httpx.AsyncClient,
) -> None:
    for guid, url in (("t-allowed", f"http://{ALLOWED_LINK_LOCAL}:8080/done"), ("t-plain", "https://ci.example/hook")):
        response = await http.post(
            "/v1/tasks", json={**TASK, "task_guid": guid, "completion_callback_url": url}
        )
        assert response.status_code == 201, (
            f"expected {url} to be taken, saw {response.status_code}: {response.text}"
        )


# --- integers past what the store holds ------------------------------------------------------------------


@pytest.mark.parametrize("index", [BIG, INT32_PAST, -1])
async def test_a_lifecycle_index_the_store_cannot_hold_is_422(http: httpx.AsyncClient, index: int) -> None:
    assert (await http.post("/v1/desired_lrps", json=LRP)).status_code == 201
    ref = {"process_guid": "web", "index": index, "instance_guid": "i-1"}
    await refused(http, "POST", "/v1/lifecycle", "index", json={"cells": {"cell-1": {"claimed": [ref]}}})


@pytest.mark.parametrize("index", [BIG, INT32_PAST])
async def test_a_placement_failure_index_the_store_cannot_hold_is_422(
    http: httpx.AsyncClient, index: int
) -> None:
    assert (await http.post("/v1/desired_lrps", json=LRP)).status_code == 201
    failure = {"process_guid": "web", "index": index, "error": "insufficient resources"}
    await refused(http, "POST", "/v1/placement_failures", "index", json={"lrps": [failure]})


@pytest.mark.parametrize("token", [BIG, INT32_PAST])
async def test_a_lease_token_the_store_cannot_hold_is_422(http: httpx.AsyncClient, token: int) -> None:
    taken = await http.post("/v1/leases/auctioneer", json={"owner": "a", "ttl_s": 30})
    assert taken.status_code == 200 and taken.json()["held"], taken.text
    await refused(http, "DELETE", "/v1/leases/auctioneer", "token", params={"owner": "a", "token": token})


@pytest.mark.parametrize("exit_status", [BIG, -BIG - 1, INT32_PAST])
async def test_a_task_exit_status_the_store_cannot_hold_is_422(
    http: httpx.AsyncClient, exit_status: int
) -> None:
    assert (await http.post("/v1/tasks", json=TASK)).status_code == 201
    started = await http.post("/v1/lifecycle", json={"cells": {"cell-1": {"tasks_started": ["t1"]}}})
    assert started.status_code == 200, started.text
    completion = {"task_guid": "t1", "exit_status": exit_status}
    await refused(http, "POST", "/v1/lifecycle", "exit_status",
                  json={"cells": {"cell-1": {"tasks_completed": [completion]}}})


async def test_a_modification_tag_index_past_the_store_is_422(http: httpx.AsyncClient) -> None:
    created = await http.post("/v1/desired_lrps", json=LRP)
    tag = {**created.json()["modification_tag"], "index": BIG}
    await refused(
        http, "PATCH", "/v1/desired_lrps/web", "index", json={"instances": 2, "modification_tag": tag}
    )


# --- cell presences ----------------------------------------------------------------------------------------

BAD_CELLS = [
    ("negative memory", {"total": {**CELL["total"], "memory_mb": -1}}, "total"),
    ("negative containers", {"total": {**CELL["total"], "containers": -5}}, "total"),
    ("memory past the store", {"total": {**CELL["total"], "memory_mb": BIG}}, "total"),
    ("rep_url not a URL", {"rep_url": "not a url"}, "rep_url"),
    ("rep_url not http", {"rep_url": "file:///var/run/rep.sock"}, "rep_url"),
    ("rep_url without a host", {"rep_url": "http:///state"}, "rep_url"),
    ("1,000 labels", {"labels": {f"k{i}": "v" for i in range(1_000)}}, "labels"),
]


@pytest.mark.parametrize(("what", "fields", "field"), BAD_CELLS, ids=[case[0] for case in BAD_CELLS])
async def test_a_hostile_cell_presence_is_422_naming_the_field(http: httpx.AsyncClient, what: str,
                                                               fields: dict[str, Any], field: str) -> None:
    await refused(http, "PUT", "/v1/cells", field, json={"cells": [{**CELL, **fields}]})


# --- quotas ------------------------------------------------------------------------------------------------


async def test_desired_lrps_past_the_quota_are_429_naming_the_limit(http: httpx.AsyncClient) -> None:
    # Five at once share a group commit: exactly the quota's three are taken.
    bodies = [{**LRP, "process_guid": f"app{i}"} for i in range(MAX_LRPS + 2)]
    answers = await asyncio.gather(*(http.post("/v1/desired_lrps", json=b) for b in bodies))
    statuses = sorted(r.status_code for r in answers)
    assert statuses == [201] * MAX_LRPS + [429] * 2, statuses
    taken = next(b["process_guid"] for b, r in zip(bodies, answers, strict=True) if r.status_code == 201)
    await refused(
        http, "POST", "/v1/desired_lrps", "max_lrps", status=429, json={**LRP, "process_guid": "one-more"}
    )
    assert (await http.delete(f"/v1/desired_lrps/{taken}")).status_code == 204  # room again
    assert (await http.post("/v1/desired_lrps", json={**LRP, "process_guid": "one-more"})).status_code == 201


async def test_instances_past_the_quota_are_429_naming_the_limit_and_scale_ups_count(
    http: httpx.AsyncClient,
) -> None:
    assert (
        await http.post("/v1/desired_lrps", json={**LRP, "instances": MAX_INSTANCES - 2})
    ).status_code == 201
    await refused(http, "POST", "/v1/desired_lrps", "max_instances", status=429,
                  json={**LRP, "process_guid": "more", "instances": 3})
    await refused(http, "PATCH", "/v1/desired_lrps/web", "max_instances", status=429,
                  json={"instances": MAX_INSTANCES + 1})
    assert (await http.patch("/v1/desired_lrps/web", json={"instances": MAX_INSTANCES})).status_code == 200
    assert (
        await http.patch("/v1/desired_lrps/web", json={"instances": 1})
    ).status_code == 200  # down: always


# --- bodies that are not JSON, nor even UTF-8 (schemathesis found these a 500) ---------------------------


# The reps' batches are validated straight from the bytes (422, as any bad body); FastAPI's own parse of the
# other bodies answers 400 "There was an error parsing the body".
@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1/lifecycle", 422),
        ("PUT", "/v1/cells", 422),
        ("POST", "/v1/desired_lrps", 400),
        ("POST", "/v1/tasks", 400),
    ],
)
async def test_a_body_that_is_not_utf8_is_4xx_and_writes_nothing(
    http: httpx.AsyncClient, method: str, path: str, status: int
) -> None:
    response = await refused(
        http,
        method,
        path,
        "body",
        status=status,
        content=b"\x1c`\xc5\xb9\xca\xa9\xb9w\x95\x0e",
        headers={"content-type": "application/json"},
    )
    assert status == 400 or "input" not in response.json()["detail"][0], "the raw body is not echoed back"


async def test_a_rep_answers_a_body_that_is_not_utf8_with_422(tmp_path: Path) -> None:
    from tests.support.rep_host import app_of, make_host

    host, executor = make_host(["c0"])
    async with app_of(host, tmp_path) as rep:
        for path in ("/work", "/stop", "/cancel", "/evacuate"):
            response = await rep.post(
                path, content=b"\xff\xfe{", headers={"content-type": "application/json"}
            )
            assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body"], (
                response.text
            )
            assert "input" not in response.json()["detail"][0], "the raw body is not echoed back"
    assert (executor.started, executor.stopped, executor.tasks, executor.cancelled) == ([], [], [], [])
    assert not host.cells["c0"].evacuating


async def test_a_callback_whose_name_resolves_to_the_metadata_address_is_not_posted(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name of one's own may point at 169.254.169.254: checked again, resolved, before each delivery (the
    resolver is replaced: these names resolve nowhere here)."""
    answers = {"rebind.test": ["169.254.169.254"], "fine.test": ["127.0.0.1"]}

    async def resolve(host: str) -> list[str]:
        return answers.get(host, [])

    monkeypatch.setattr("common.urls.resolve", resolve)
    recorder = Recorder()
    settings = BBSSettings(
        data_dir=tmp_path, database_url=database_url, auctioneer_url=AUCTIONEER, send_attempts=1
    )
    outbound = httpx.AsyncClient(transport=httpx.MockTransport(recorder.handle), timeout=5)
    async with running_bbs(settings, converge=False, client=outbound, callback_client=outbound) as bbs:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(bbs, insecure=True)),
                                     base_url="http://bbs") as http:
            for guid in ("rebind", "fine"):
                created = await http.post("/v1/tasks", json={**TASK, "task_guid": guid,
                                                             "completion_callback_url": f"http://{guid}.test/done"})
                assert created.status_code == 201, created.text  # a name says nothing until it is resolved
            report = {"tasks_started": ["rebind", "fine"],
                      "tasks_completed": [{"task_guid": "rebind", "exit_status": 0},
                                          {"task_guid": "fine", "exit_status": 0}]}
            assert (await http.post("/v1/lifecycle", json={"cells": {"cell-1": report}})).status_code == 200
            await bbs.outbound.drain(5.0)
            assert [body["task_guid"] for body in recorder.to("http://fine.test/done")] == ["fine"]
            assert recorder.to("http://rebind.test") == [], "the task was POSTed to a metadata address"
            assert (await http.get("/v1/tasks/rebind")).json()["state"] == "COMPLETED"  # kept, undelivered


# --- NUL anywhere: no PostgreSQL text column holds one (each of these was a 500 there) -------------------

NUL_EVERYWHERE = [
    ("GET", "/v1/desired_lrps/a%00b", "process_guid", {}),
    ("PATCH", "/v1/desired_lrps/a%00", "process_guid", {"json": {"instances": 1}}),
    ("DELETE", "/v1/desired_lrps/a%00", "process_guid", {}),
    ("GET", "/v1/desired_lrps", "domain", {"params": {"domain": "a\0"}}),
    ("GET", "/v1/actual_lrps", "cell_id", {"params": {"cell_id": "b\0"}}),
    ("GET", "/v1/actual_lrps/summary", "process_guid", {"params": {"process_guid": "a\0"}}),
    ("GET", "/v1/tasks", "domain", {"params": {"domain": "a\0"}}),
    ("GET", "/v1/tasks/a%00", "task_guid", {}),
    ("POST", "/v1/tasks/a%00/cancel", "task_guid", {}),
    ("DELETE", "/v1/tasks/a%00", "task_guid", {}),
    ("DELETE", "/v1/tokens/a%00", "token_id", {}),
    ("POST", "/v1/tokens", "name", {"json": {"role": "admin", "name": "a\0"}}),
    ("POST", "/v1/leases/auctioneer", "owner", {"json": {"owner": "a\0", "ttl_s": 1}}),
    ("POST", "/v1/leases/auctioneer", "url", {"json": {"owner": "a", "ttl_s": 1, "url": "http://x\0"}}),
    ("DELETE", "/v1/leases/auctioneer", "owner", {"params": {"owner": "a\0", "token": 1}}),
    ("POST", "/v1/desired_lrps", "source_blob", {"json": {**LRP, "source_blob": "a\0"}}),
    ("POST", "/v1/desired_lrps", "stack", {"json": {**LRP, "stack": "s\0"}}),
    ("POST", "/v1/tasks", "placement_tags", {"json": {**TASK, "placement_tags": ["t\0"]}}),
    ("PUT", "/v1/cells", "zone", {"json": {"cells": [{**CELL, "zone": "z\0"}]}}),
    ("PUT", "/v1/cells", "labels", {"json": {"cells": [{**CELL, "labels": {"k": "v\0"}}]}}),
    (
        "POST",
        "/v1/lifecycle",
        "instance_guid",
        {
            "json": {
                "cells": {"c": {"claimed": [{"process_guid": "web", "index": 0, "instance_guid": "i\0"}]}}
            }
        },
    ),
    (
        "POST",
        "/v1/lifecycle",
        "host",
        {
            "json": {
                "cells": {
                    "c": {
                        "running": [{"process_guid": "web", "index": 0, "instance_guid": "i", "host": "h\0"}]
                    }
                }
            }
        },
    ),
    ("POST", "/v1/lifecycle", "tasks_started", {"json": {"cells": {"c": {"tasks_started": ["t\0"]}}}}),
    (
        "POST",
        "/v1/placement_failures",
        "process_guid",
        {"json": {"lrps": [{"process_guid": "w\0", "index": 0, "error": "e"}]}},
    ),
    (
        "POST",
        "/v1/auctions",
        "process_guid",
        {
            "json": {
                "duration_s": 0,
                "fetch_states_s": 0,
                "explanations": [{"process_guid": "w\0", "index": 0, "placed": True}],
            }
        },
    ),
    (
        "POST",
        "/v1/auctions",
        "zone",
        {
            "json": {
                "duration_s": 0,
                "fetch_states_s": 0,
                "explanations": [
                    {
                        "process_guid": "w",
                        "index": 0,
                        "placed": True,
                        "candidates": [{"cell_id": "c", "zone": "z\0", "zone_index": 0}],
                    }
                ],
            }
        },
    ),
]


@pytest.mark.parametrize(("method", "path", "field", "request_"), NUL_EVERYWHERE,
                         ids=[f"{m} {p} {f}" for m, p, f, _ in NUL_EVERYWHERE])
async def test_a_nul_in_any_field_that_reaches_the_store_is_422(
    http: httpx.AsyncClient, method: str, path: str, field: str, request_: dict[str, Any]
) -> None:
    await refused(http, method, path, field, **request_)


async def test_a_nul_in_what_a_process_printed_is_kept_visibly(http: httpx.AsyncClient) -> None:
    assert (await http.post("/v1/tasks", json=TASK)).status_code == 201
    done = {"task_guid": "t1", "exit_status": 1, "failed": True, "failure_reason": "exit\0", "result": "a\0b"}
    report = {"tasks_started": ["t1"], "tasks_completed": [done]}
    assert (await http.post("/v1/lifecycle", json={"cells": {"cell-1": report}})).status_code == 200
    task = (await http.get("/v1/tasks/t1")).json()
    assert (task["failure_reason"], task["result"]) == ("exit\ufffd", "a\ufffdb")
