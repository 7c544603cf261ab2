"""The Diego API's authorization table, enforced: a real `vendue bbs --diego-listen` process serving HTTPS
with certificates from common/tls.py, called by every role. Refused requests carry bodies that would write:
if a check failed open, the "nothing written" assertion would see it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bbs.diego.app import create_diego_app
from bbs.diego.codec import PROTOBUF
from bbs.diego.events import EVENT_PATHS
from bbs.diego.pb import diego_pb2 as pb
from bbs.diego.policy import DIEGO_POLICY
from bbs.diego.routes import ROUTES
from bbs.server import running_bbs
from bbs.settings import BBSSettings
from common.tls import ROLES, TLSFiles, client_context, init_ca, issue
from tests.support.bbs_process import BBSProcess

CALLERS = {role: f"{role}-caller" for role in ROLES}


def sample(path: str) -> bytes:
    """A valid request for `path` that would write."""
    lrp = pb.DesiredLRP(process_guid="web", domain="d", instances=1, memory_mb=64, disk_mb=64)
    lrp.action.run_action.path = "true"
    task = pb.TaskDefinition(memory_mb=64, disk_mb=64)
    task.action.run_action.path = "true"
    bodies: dict[str, Any] = {
        "/v1/domains/upsert": pb.UpsertDomainRequest(domain="d", ttl=60),
        "/v1/desired_lrp/desire.r2": pb.DesireLRPRequest(desired_lrp=lrp),
        "/v1/tasks/desire.r2": pb.DesireTaskRequest(task_guid="t1", domain="d", task_definition=task),
    }
    message = bodies.get(path)
    return message.SerializeToString() if message is not None else b""


async def test_every_route_has_a_row_and_every_row_a_route(tmp_path: Path) -> None:
    async with running_bbs(BBSSettings(data_dir=tmp_path), converge=False) as bbs:
        app = create_diego_app(bbs, insecure=False)
    assert DIEGO_POLICY.missing(app.router.routes) == []
    served = {(method, route.path) for route in app.router.routes for method in getattr(route, "methods", ())}
    assert [row for row in DIEGO_POLICY.rows if row not in served] == []
    assert {path for _, path in DIEGO_POLICY.rows} == {r.path for r in ROUTES} | set(EVENT_PATHS)
    writes = {r.path for r in ROUTES if r.writes}
    for (_, path), rule in DIEGO_POLICY.rows.items():
        if path in writes:
            assert rule.roles == {"admin", "cf"}, (path, rule)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    init_ca(directory)
    issue(directory, role="bbs", name="bbs")
    issue(directory, role="admin", name="admin")
    for role, name in CALLERS.items():
        issue(directory, role=role, name=name, cells=["cell-1"] if role == "rep" else ())
    return directory


@pytest.fixture
def bbs(pki: Path, tmp_path: Path) -> Iterator[BBSProcess]:
    process = BBSProcess(tmp_path, "diego", None, "--diego-listen", "127.0.0.1:0", certs=pki)
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_every_route_refuses_a_caller_without_identity_and_every_role_outside_its_row(
    pki: Path, bbs: BBSProcess
) -> None:
    assert bbs.diego_url.startswith("https://"), bbs.diego_url
    clients = {role: httpx.Client(base_url=bbs.diego_url, timeout=10, verify=client_context(
        TLSFiles.in_dir(pki, name) if name else None, ca=pki / "ca.pem"))
        for role, name in {**CALLERS, None: None}.items()}
    try:
        for (method, path), rule in DIEGO_POLICY.rows.items():
            body = sample(path) if method == "POST" else b""
            headers = {"Content-Type": PROTOBUF}
            if rule.public:
                assert clients[None].request(method, path).status_code == 200, path
                continue
            anonymous = clients[None].request(method, path, content=body, headers=headers)
            assert anonymous.status_code == 401, f"{method} {path} without identity: {anonymous.status_code}"
            for role in ROLES:
                if role in rule.roles:
                    continue
                refused = clients[role].request(method, path, content=body, headers=headers)
                assert refused.status_code == 403, f"{method} {path} as {role}: {refused.status_code}"
                assert f"role {role}" in refused.json()["detail"], refused.text
        reader = clients["reader"]
        listed = pb.DesiredLRPsResponse.FromString(reader.post("/v1/desired_lrps/list.r3").content)
        tasks = pb.TasksResponse.FromString(reader.post("/v1/tasks/list.r3").content)
        domains = pb.DomainsResponse.FromString(reader.post("/v1/domains/list").content)
        assert (list(listed.desired_lrps), list(tasks.tasks), list(domains.domains)) == ([], [], []), (
            "a refused request wrote something")
        # and a role in the rows gets through: cf desires
        desired = clients["cf"].post("/v1/desired_lrp/desire.r2", content=sample("/v1/desired_lrp/desire.r2"))
        answer = pb.DesiredLRPLifecycleResponse.FromString(desired.content)
        assert not answer.HasField("error"), answer
        # a reader sees env values masked; cf sees them
        secret = pb.DesiredLRP(process_guid="secret", domain="d", instances=0, memory_mb=64, disk_mb=64)
        secret.action.run_action.CopyFrom(pb.RunAction(path="true", env=[pb.EnvironmentVariable(
            name="TOKEN", value="s3cret")]))
        clients["cf"].post("/v1/desired_lrp/desire.r2",
                           content=pb.DesireLRPRequest(desired_lrp=secret).SerializeToString())
        ask = pb.DesiredLRPByProcessGuidRequest(process_guid="secret").SerializeToString()
        for role, value in (("reader", "***"), ("cf", "s3cret"), ("admin", "s3cret")):
            read = pb.DesiredLRPResponse.FromString(
                clients[role].post("/v1/desired_lrps/get_by_process_guid.r3", content=ask).content)
            assert [e.value for e in read.desired_lrp.action.run_action.env] == [value], (role, read)
    finally:
        for client in clients.values():
            client.close()
