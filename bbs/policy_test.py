"""The BBS's authorization table, enforced: a real `vendue bbs` process serving HTTPS with certificates from
common/tls.py (made in tmp), called by every role (docs/security.md, "BBS").

Refused requests carry valid bodies: if a check failed open, they would write, and the "writes nothing"
assertions would see it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bbs.api import create_app
from bbs.policy import POLICY
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from common.auth import bbs_token_verifier
from common.tls import ROLES, TLSFiles, client_context, init_ca, issue
from tests.support.bbs_process import BBSProcess
from tests.support.polling import expect, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

CELL = {"zone": "z1", "total": {"memory_mb": 1024, "disk_mb": 1024, "containers": 10}}
# The certificate each role's calls are made with (the rep speaks for cell-1 only).
CALLERS = {"admin": "admin", "reader": "viewer", "bbs": "bbs", "auctioneer": "auctioneer", "rep": "rep-1",
           "cf": "cf"}


def presence(cell_id: str, **fields: Any) -> dict[str, Any]:
    return {"cell_id": cell_id, "rep_url": "https://127.0.0.1:1", **CELL, **fields}  # its rep process's root


# A blob upload whose body (sent as JSON, as every sample's) is its digest: an upload that would store.
BLOB_BODY = "an app's code"
BLOB_DIGEST = "sha256:" + hashlib.sha256(json.dumps(BLOB_BODY).encode()).hexdigest()
# One valid request per row (path parameters filled in, a body that would write): (path, json, params).
SAMPLES: dict[tuple[str, str], tuple[str, Any, dict[str, Any] | None]] = {
    ("GET", "/metrics"): ("/metrics", None, None),
    ("GET", "/openapi.json"): ("/openapi.json", None, None),
    ("GET", "/docs"): ("/docs", None, None),
    ("POST", "/v1/desired_lrps"): ("/v1/desired_lrps", {"process_guid": "web", "instances": 1,
                                                        "command": ["true"]}, None),
    ("GET", "/v1/desired_lrps"): ("/v1/desired_lrps", None, None),
    ("GET", "/v1/desired_lrps/{process_guid}"): ("/v1/desired_lrps/web", None, None),
    ("PATCH", "/v1/desired_lrps/{process_guid}"): ("/v1/desired_lrps/web", {"instances": 2}, None),
    ("DELETE", "/v1/desired_lrps/{process_guid}"): ("/v1/desired_lrps/web", None, None),
    # a WebSocket: a plain GET is judged by its row, then answered 404 (tests/e2e/test_exec.py upgrades)
    ("GET", "/v1/desired_lrps/{process_guid}/instances/{index}/exec"): (
        "/v1/desired_lrps/web/instances/0/exec", None, None),
    ("PUT", "/v1/desired_lrps/{process_guid}"): ("/v1/desired_lrps/web", {"command": ["sleep", "9"]}, None),
    ("GET", "/v1/desired_lrps/{process_guid}/rollout"): ("/v1/desired_lrps/web/rollout", None, None),
    ("GET", "/v1/desired_lrps/{process_guid}/rollouts"): ("/v1/desired_lrps/web/rollouts", None, None),
    ("GET", "/v1/desired_lrps/{process_guid}/events"): ("/v1/desired_lrps/web/events", None, None),
    ("GET", "/v1/desired_lrps/{process_guid}/versions"): ("/v1/desired_lrps/web/versions", None, None),
    ("POST", "/v1/desired_lrps/{process_guid}/rollout/pause"): ("/v1/desired_lrps/web/rollout/pause", {},
                                                                None),
    ("POST", "/v1/desired_lrps/{process_guid}/rollout/resume"): ("/v1/desired_lrps/web/rollout/resume", {},
                                                                 None),
    ("POST", "/v1/desired_lrps/{process_guid}/rollout/undo"): ("/v1/desired_lrps/web/rollout/undo", {}, None),
    ("POST", "/v1/desired_lrps/{process_guid}/restart"): ("/v1/desired_lrps/web/restart", {}, None),
    ("POST", "/v1/desired_lrps/{process_guid}/instances/{index}/restart"): (
        "/v1/desired_lrps/web/instances/0/restart", {}, None),
    ("GET", "/v1/actual_lrps"): ("/v1/actual_lrps", None, None),
    ("GET", "/v1/actual_lrps/summary"): ("/v1/actual_lrps/summary", None, None),
    ("GET", "/v1/usage"): ("/v1/usage", None, None),
    ("POST", "/v1/tasks"): ("/v1/tasks", {"task_guid": "t1", "command": ["true"]}, None),
    ("GET", "/v1/tasks"): ("/v1/tasks", None, None),
    ("GET", "/v1/tasks/{task_guid}"): ("/v1/tasks/t1", None, None),
    ("POST", "/v1/tasks/{task_guid}/cancel"): ("/v1/tasks/t1/cancel", None, None),
    ("DELETE", "/v1/tasks/{task_guid}"): ("/v1/tasks/t1", None, None),
    ("GET", "/v1/logs/{process_guid}"): ("/v1/logs/web", None, None),
    ("GET", "/v1/tasks/{task_guid}/logs"): ("/v1/tasks/t1/logs", None, None),
    ("PUT", "/v1/cells"): ("/v1/cells", {"cells": [presence("cell-1")]}, None),
    ("POST", "/v1/lifecycle"): ("/v1/lifecycle", {"cells": {"cell-1": {}}}, None),
    ("GET", "/v1/cells"): ("/v1/cells", None, None),
    ("DELETE", "/v1/cells/{cell_id}"): ("/v1/cells/cell-1", None, None),
    ("POST", "/v1/cells/{cell_id}/cordon"): ("/v1/cells/cell-1/cordon", None, None),
    ("POST", "/v1/cells/{cell_id}/uncordon"): ("/v1/cells/cell-1/uncordon", None, None),
    ("POST", "/v1/cells/{cell_id}/drain"): ("/v1/cells/cell-1/drain", None, None),
    ("POST", "/v1/rebalance"): ("/v1/rebalance", {"dry_run": True}, None),
    ("GET", "/v1/rebalance"): ("/v1/rebalance", None, None),
    ("POST", "/v1/placement_failures"): ("/v1/placement_failures", {"fencing_token": 0}, None),
    ("POST", "/v1/auctions"): (
        "/v1/auctions",
        {
            "duration_s": 0.1,
            "fetch_states_s": 0.01,
            "explanations": [{"process_guid": "web", "index": 0, "placed": True, "cell_id": "cell-1"}],
        },
        None,
    ),
    ("GET", "/v1/actual_lrps/{process_guid}/{index}/placement"): (
        "/v1/actual_lrps/web/0/placement",
        None,
        None,
    ),
    ("POST", "/v1/leases/{name}"): ("/v1/leases/auctioneer", {"owner": "probe", "ttl_s": 30}, None),
    ("DELETE", "/v1/leases/{name}"): ("/v1/leases/auctioneer", None, {"owner": "probe", "token": 1}),
    ("GET", "/v1/leases/{name}"): ("/v1/leases/auctioneer", None, None),
    ("GET", "/v1/events"): ("/v1/events", None, None),
    ("GET", "/v1/events/recent"): ("/v1/events/recent", None, None),
    ("GET", "/ui"): ("/ui", None, None),
    ("POST", "/v1/tokens"): ("/v1/tokens", {"role": "admin", "name": "probe"}, None),
    ("GET", "/v1/tokens"): ("/v1/tokens", None, None),
    ("DELETE", "/v1/tokens/{token_id}"): ("/v1/tokens/abc", None, None),
    ("POST", "/v1/tokens/verify"): ("/v1/tokens/verify", {"token": "vdt_unknown"}, None),
    ("PUT", "/v1/blobs/{digest}"): (f"/v1/blobs/{BLOB_DIGEST}", BLOB_BODY, None),
    ("GET", "/v1/blobs"): ("/v1/blobs", None, None),
    ("GET", "/v1/blobs/{digest}"): (f"/v1/blobs/{BLOB_DIGEST}", None, None),
    ("HEAD", "/v1/blobs/{digest}"): (f"/v1/blobs/{BLOB_DIGEST}", None, None),
    ("DELETE", "/v1/blobs/{digest}"): (f"/v1/blobs/{BLOB_DIGEST}", None, None),
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    init_ca(directory)
    for role, name in CALLERS.items():
        issue(directory, role=role, name=name, cells=["cell-1"] if role == "rep" else ())
    return directory


@pytest.fixture
def bbs(pki: Path, tmp_path: Path) -> Iterator[BBSProcess]:
    process = BBSProcess(tmp_path, "tls", certs=pki)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def calls(pki: Path, bbs: BBSProcess) -> Iterator[dict[str | None, httpx.Client]]:
    """A keep-alive client per role (None: no certificate), trusting only the cluster CA."""
    clients: dict[str | None, httpx.Client] = {
        role: httpx.Client(
            base_url=bbs.url, timeout=10,
            verify=client_context(TLSFiles.in_dir(pki, name) if name else None, ca=pki / "ca.pem"),
        )
        for role, name in {**CALLERS, None: None}.items()
    }
    try:
        yield clients
    finally:
        for client in clients.values():
            client.close()


def send(client: httpx.Client, method: str, template: str, token: str | None = None) -> httpx.Response:
    path, body, params = SAMPLES[method, template]
    headers = {"authorization": f"Bearer {token}"} if token else None
    if template == "/v1/events":  # a stream that never ends: read only a refusal
        with client.stream(method, path, headers=headers) as response:
            if response.is_error:
                response.read()
            return response
    return client.request(method, path, json=body, params=params, headers=headers)


def state(admin: httpx.Client) -> dict[str, Any]:
    """Everything a request could have written, read as admin."""
    listed = {path: admin.get(path).json()["items"]
              for path in ("/v1/desired_lrps", "/v1/actual_lrps", "/v1/tasks", "/v1/cells", "/v1/tokens",
                           "/v1/blobs")}
    return {**listed, "lease": admin.get("/v1/leases/auctioneer").status_code,
            "placement": admin.get("/v1/actual_lrps/web/0/placement").status_code}


def refused_count(admin: httpx.Client, reason: str) -> float:
    line = f'vendue_refused_requests_total{{reason="{reason}"}} '
    found = [ln for ln in admin.get("/metrics").text.splitlines() if ln.startswith(line)]
    return float(found[0].removeprefix(line)) if found else 0.0


async def test_every_route_has_a_row_and_every_row_a_route_and_a_sample(tmp_path: Path) -> None:
    async with running_bbs(BBSSettings(data_dir=tmp_path), converge=False) as bbs:
        app = create_app(bbs, insecure=False)
    assert POLICY.missing(app.router.routes) == []
    served = {(method, route.path) for route in app.router.routes
              for method in getattr(route, "methods", None) or ("GET",)}
    stale = [row for row in POLICY.rows if row not in served]
    assert stale == [], f"rows for routes the BBS does not serve: {stale}"
    unsampled = [row for row, rule in POLICY.rows.items() if not rule.public and row not in SAMPLES]
    assert unsampled == [], f"add a sample request for {unsampled}"


def test_every_route_refuses_a_caller_without_identity_and_every_role_outside_its_row(
    bbs: BBSProcess, calls: dict[str | None, httpx.Client]
) -> None:
    admin = calls["admin"]
    assert bbs.url.startswith("https://")
    assert calls[None].get("/ping").json() == {"ok": True, "ready": True, "insecure": False}
    before, no_identity_before = state(admin), refused_count(admin, "no_identity")
    expected_401 = 0
    for (method, template), rule in POLICY.rows.items():
        if rule.public:
            response = calls[None].get(template)
            assert response.status_code == 200, (
                f"{template} is public: {response.status_code} {response.text}")
            continue
        response = send(calls[None], method, template)
        assert response.status_code == 401, f"{method} {template} without identity: {response.status_code}"
        expected_401 += 1
        for role in ROLES:
            if role in rule.roles:
                continue
            response = send(calls[role], method, template)
            assert response.status_code == 403, (
                f"{method} {template} as {role}: {response.status_code} {response.text}")
            if method != "HEAD":  # an answer to HEAD has no body
                assert f"role {role}" in response.json()["detail"], response.text
    assert state(admin) == before, "a refused request wrote something"
    assert refused_count(admin, "no_identity") - no_identity_before == expected_401


def test_every_role_in_a_row_gets_past_authorization(calls: dict[str | None, httpx.Client]) -> None:
    for (method, template), rule in POLICY.rows.items():
        if rule.public:
            continue
        for role in sorted(rule.roles):
            response = send(calls[role], method, template)
            assert response.status_code not in (401, 403), (
                f"{method} {template} as {role}: {response.status_code} {response.text}")


def test_a_rep_reports_only_for_the_cells_in_its_certificate(calls: dict[str | None, httpx.Client]) -> None:
    rep, admin = calls["rep"], calls["admin"]
    assert rep.put("/v1/cells", json={"cells": [presence("cell-1")]}).status_code == 200
    assert admin.post("/v1/desired_lrps", json={"process_guid": "web", "instances": 1,
                                                "command": ["true"]}).status_code == 201
    hijack = rep.put("/v1/cells", json={"cells": [presence("cell-1", zone="z9"), presence("cell-2")]})
    assert hijack.status_code == 403 and "cell-2" in hijack.json()["detail"], hijack.text
    claim = {"process_guid": "web", "index": 0, "instance_guid": "g"}
    report = rep.post("/v1/lifecycle", json={"cells": {"cell-1": {}, "cell-2": {"claimed": [claim]}}})
    assert report.status_code == 403 and "cell-2" in report.json()["detail"], report.text
    cells = admin.get("/v1/cells").json()["items"]
    assert [(c["cell_id"], c["zone"]) for c in cells] == [("cell-1", "z1")], "cell-1's presence changed"
    assert [a["state"] for a in admin.get("/v1/actual_lrps").json()["items"]] == ["UNCLAIMED"]
    # Its own cell, it may claim for.
    own = rep.post("/v1/lifecycle", json={"cells": {"cell-1": {"claimed": [claim]}}})
    assert own.status_code == 200 and own.json()["cells"]["cell-1"]["refused"] == [], own.text
    assert [a["cell_id"] for a in admin.get("/v1/actual_lrps").json()["items"]] == ["cell-1"]


def test_only_the_auctioneer_holds_a_lease_and_only_the_auctioneer_lease(
    calls: dict[str | None, httpx.Client],
) -> None:
    body = {"owner": "mallory", "ttl_s": 300}
    for role in ("admin", "reader", "rep", "bbs"):
        for method, params in (("POST", None), ("DELETE", {"owner": "a", "token": 1})):
            response = calls[role].request(method, "/v1/leases/auctioneer",
                                           json=body if method == "POST" else None, params=params)
            assert response.status_code == 403, f"{method} lease as {role}: {response.status_code}"
    auctioneer = calls["auctioneer"]
    for name in ("convergence", "other"):
        taken = auctioneer.post(f"/v1/leases/{name}", json=body)
        assert taken.status_code == 403, taken.text
        assert "only the lease 'auctioneer'" in taken.json()["detail"], taken.text
        released = auctioneer.delete(f"/v1/leases/{name}", params={"owner": "mallory", "token": 1})
        assert released.status_code == 403, released.text
        lease = calls["admin"].get(f"/v1/leases/{name}")  # the BBS's own converger holds "convergence"
        assert lease.status_code == 404 or lease.json()["owner"] != "mallory", lease.text
    held = auctioneer.post("/v1/leases/auctioneer", json={"owner": "a", "url": "https://a:1", "ttl_s": 30})
    assert held.status_code == 200 and held.json()["held"] is True, held.text
    # a rep reads the auctioneer lease
    assert calls["rep"].get("/v1/leases/auctioneer").json()["owner"] == "a"


def test_a_placement_failure_report_from_a_deposed_auctioneer_is_refused(
    calls: dict[str | None, httpx.Client],
) -> None:
    auctioneer, admin = calls["auctioneer"], calls["admin"]
    assert admin.post("/v1/tasks", json={"task_guid": "t1", "command": ["true"]}).status_code == 201
    first = auctioneer.post("/v1/leases/auctioneer", json={"owner": "a", "ttl_s": 30}).json()
    released = auctioneer.delete("/v1/leases/auctioneer", params={"owner": "a", "token": first["token"]})
    assert released.status_code == 204, released.text
    second = auctioneer.post("/v1/leases/auctioneer", json={"owner": "b", "ttl_s": 30}).json()
    assert (first["token"], second["token"]) == (1, 2)
    failure = {"tasks": [{"task_guid": "t1", "error": "insufficient resources"}]}
    for stale in (1, 0):
        refused = auctioneer.post("/v1/placement_failures", json={**failure, "fencing_token": stale})
        assert refused.status_code == 409 and "older" in refused.json()["detail"], refused.text
    assert admin.get("/v1/tasks/t1").json()["rejection_count"] == 0, "a stale report was applied"
    current = auctioneer.post("/v1/placement_failures", json={**failure, "fencing_token": 2})
    assert current.status_code == 204, current.text
    assert admin.get("/v1/tasks/t1").json()["rejection_count"] == 1


def test_bearer_tokens(bbs: BBSProcess, tmp_path: Path, calls: dict[str | None, httpx.Client]) -> None:
    admin, anonymous = calls["admin"], calls[None]
    created = admin.post("/v1/tokens", json={"role": "reader", "name": "dashboards"})
    assert created.status_code == 201, created.text
    reader = created.json()
    assert reader["token"].startswith("vdt_") and reader["role"] == "reader"

    def as_token(token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return anonymous.request(method, path, headers={"authorization": f"Bearer {token}"}, **kwargs)

    assert as_token(reader["token"], "GET", "/v1/desired_lrps").status_code == 200
    denied = as_token(reader["token"], "POST", "/v1/desired_lrps", json={"process_guid": "web",
                                                                         "command": ["true"]})
    assert denied.status_code == 403 and "role reader (dashboards)" in denied.json()["detail"], denied.text
    assert admin.get("/v1/desired_lrps").json()["items"] == []
    assert as_token("vdt_not-a-token", "GET", "/v1/desired_lrps").status_code == 401

    # An admin token manages tokens too; none may stand for a component or make component calls.
    ops = admin.post("/v1/tokens", json={"role": "admin", "name": "ops"}).json()
    assert as_token(ops["token"], "GET", "/v1/tokens").status_code == 200
    assert as_token(ops["token"], "PUT", "/v1/cells", json={"cells": [presence("cell-1")]}).status_code == 403
    verify = as_token(ops["token"], "POST", "/v1/tokens/verify", json={"token": ops["token"]})
    assert verify.status_code == 403, verify.text
    for role in ("rep", "auctioneer", "bbs"):
        component = admin.post("/v1/tokens", json={"role": role})
        assert component.status_code == 422 and component.json()["detail"][0]["loc"] == ["body", "role"]

    # Listed without secrets; stored as a hash only.
    listing = admin.get("/v1/tokens")
    assert {t["name"] for t in listing.json()["items"]} == {"dashboards", "ops"}
    digest = hashlib.sha256(reader["token"].encode()).hexdigest()
    for secret in (reader["token"], ops["token"], digest):
        assert secret not in listing.text
    with sqlite3.connect(tmp_path / "bbs.db") as db:
        stored = db.execute("SELECT secret_sha256 FROM tokens WHERE id = ?", (reader["id"],)).fetchone()
        dump = "\n".join(db.iterdump())
    assert stored == (digest,) and reader["token"] not in dump

    # Components ask the BBS who a token stands for (with their certificates).
    verified = calls["rep"].post("/v1/tokens/verify", json={"token": reader["token"]})
    assert verified.json() == {"role": "reader", "name": "dashboards", "id": reader["id"]}

    # Revoked: refused from the next request on, and no longer verified.
    assert admin.delete(f"/v1/tokens/{reader['id']}").status_code == 204
    assert as_token(reader["token"], "GET", "/v1/desired_lrps").status_code == 401
    assert calls["auctioneer"].post("/v1/tokens/verify", json={"token": reader["token"]}).status_code == 404
    assert [t["revoked"] for t in admin.get("/v1/tokens").json()["items"]] == [True, False]
    assert admin.delete("/v1/tokens/nosuchtoken").status_code == 404

    # Expired: refused.
    brief = admin.post("/v1/tokens", json={"role": "reader", "expires_in_s": 0.05}).json()

    def refused() -> bool:
        status = as_token(brief["token"], "GET", "/v1/tasks").status_code
        return expect(status == 401, f"status {status}")

    wait_for(refused, 5.0, "the 0.05 s token refused")
    assert refused_count(admin, "bad_token") >= 3


async def test_the_components_token_verifier_asks_this_bbs(pki: Path, calls: dict[str | None, httpx.Client],
                                                          bbs: BBSProcess) -> None:
    token = calls["admin"].post("/v1/tokens", json={"role": "admin", "name": "ops"}).json()["token"]
    files = TLSFiles.in_dir(pki, "auctioneer")
    async with httpx.AsyncClient(base_url=bbs.url, verify=client_context(files), timeout=10) as client:
        verify = bbs_token_verifier(client, cache_s=0.0)
        identity = await verify(token)
        assert identity is not None
        assert (identity.role, identity.name, identity.via) == ("admin", "ops", "token")
        assert await verify("vdt_unknown") is None
        # A token made without a name is named by its id, here as in the BBS's own check (its 403s say so).
        unnamed = calls["admin"].post("/v1/tokens", json={"role": "reader"}).json()
        identity = await verify(unnamed["token"])
        assert identity is not None and identity.name == f"token {unnamed['id']}", identity
        denied = calls[None].post("/v1/tasks", headers={"authorization": f"Bearer {unnamed['token']}"})
        assert f"role reader (token {unnamed['id']})" in denied.json()["detail"], denied.text
    # A BBS refusing the component itself (no certificate: 401) says nothing about the token: not "invalid".
    no_certificate = client_context(ca=pki / "ca.pem")
    async with httpx.AsyncClient(base_url=bbs.url, verify=no_certificate, timeout=10) as client:
        with pytest.raises(httpx.HTTPStatusError):
            await bbs_token_verifier(client)(token)


def test_an_auction_report_from_a_deposed_auctioneer_is_refused(
    calls: dict[str | None, httpx.Client],
) -> None:
    auctioneer, admin = calls["auctioneer"], calls["admin"]
    first = auctioneer.post("/v1/leases/auctioneer", json={"owner": "a", "ttl_s": 30}).json()
    auctioneer.delete("/v1/leases/auctioneer", params={"owner": "a", "token": first["token"]})
    second = auctioneer.post("/v1/leases/auctioneer", json={"owner": "b", "ttl_s": 30}).json()
    path, report, _ = SAMPLES["POST", "/v1/auctions"]
    refused = auctioneer.post(path, json={**report, "fencing_token": first["token"]})
    assert refused.status_code == 409 and "older" in refused.json()["detail"], refused.text
    assert admin.get("/v1/actual_lrps/web/0/placement").status_code == 404, "a stale report was kept"
    current = auctioneer.post(path, json={**report, "fencing_token": second["token"]})
    assert current.status_code == 204, current.text
    assert calls["reader"].get("/v1/actual_lrps/web/0/placement").json()["cell_id"] == "cell-1"


def test_a_reader_cannot_touch_blobs_and_a_rep_can_only_download(
    calls: dict[str | None, httpx.Client],
) -> None:
    admin, reader, rep = calls["admin"], calls["reader"], calls["rep"]
    path = f"/v1/blobs/{BLOB_DIGEST}"
    body = json.dumps(BLOB_BODY).encode()
    for caller in (reader, rep):
        refused = caller.put(path, content=body)
        assert refused.status_code == 403, refused.text
    assert admin.get("/v1/blobs").json()["items"] == [], "a refused upload stored something"
    assert admin.put(path, content=body).status_code == 201
    downloaded = rep.get(path)
    assert downloaded.status_code == 200 and downloaded.content == body
    assert rep.get(path, headers={"range": "bytes=1-"}).content == body[1:]
    assert rep.head(path).headers["content-length"] == str(len(body))
    for method in ("GET", "HEAD"):
        assert reader.request(method, path).status_code == 403, f"{method} as reader"
    for caller in (reader, rep):
        assert caller.get("/v1/blobs").status_code == 403
        assert caller.delete(path).status_code == 403
    assert [b["digest"] for b in admin.get("/v1/blobs").json()["items"]] == [BLOB_DIGEST]
    assert admin.delete(path).status_code == 204
