"""Diego's API in-process (httpx ASGITransport over the `h` BBS, SQLite and PostgreSQL), with the project's
own protobuf client: what cfdot does not call (the `.r2` reads, list_by_process_guids, routing infos,
resolving, domain freshness), the wire's error contract, and desire-then-read fidelity."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bbs.diego.app import create_diego_app
from bbs.diego.codec import PROTOBUF
from bbs.diego.pb import diego_pb2 as pb
from tests.support.bbs_harness import Harness
from tests.support.polling import eventually, expect

GUID = "7c5a1d2e-3f4b-4c6d-8e9f-0a1b2c3d4e5f-9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"  # Cloud Controller's form
CODE = hashlib.sha256(b"the app").hexdigest()


class Diego:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def call(self, path: str, request: Any, response_type: Any) -> Any:
        body = request.SerializeToString() if request is not None else b""
        answer = await self.http.post(path, content=body, headers={"Content-Type": PROTOBUF})
        assert answer.status_code == 200, f"{path}: expected 200, saw {answer.status_code} {answer.text}"
        assert answer.headers["content-type"] == PROTOBUF
        message = response_type()
        message.ParseFromString(answer.content)
        return message


@pytest.fixture
async def diego(h: Harness) -> AsyncIterator[Diego]:
    transport = httpx.ASGITransport(app=create_diego_app(h.bbs, insecure=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://diego", timeout=10) as http:
        yield Diego(http)


def lrp(guid: str = GUID, instances: int = 2, domain: str = "cf-apps") -> pb.DesiredLRP:
    desired = pb.DesiredLRP(
        process_guid=guid, domain=domain, root_fs="preloaded:cflinuxfs4", instances=instances, memory_mb=64,
        disk_mb=128, ports=[8080], log_guid=guid[:36], metrics_guid="m", annotation="etag-1",
        egress_rules=[b"\n\x03tcp"], network=b"\n\x05\n\x01k\x12\x00", start_timeout_ms=30_000,
        placement_tags=["blue"])
    desired.environment_variables.add(name="LANG", value="en_US.UTF-8")
    desired.setup.download_action.CopyFrom(pb.DownloadAction(
        to="/home/vcap", checksum_algorithm="sha256", checksum_value=CODE,
        **{"from": "https://blobs.example.com/droplet.tgz"}))
    run = desired.action.codependent_action.actions.add().run_action
    run.path, run.user = "/tmp/lifecycle/launcher", "vcap"
    run.args.extend(["app", "bundle exec rackup", ""])
    run.env.add(name="SECRET", value="s3cret")
    desired.routes.routes["cf-router"] = b'[{"hostnames":["web.example.com"],"port":8080}]'
    desired.metric_tags["source_id"].static = "app-guid"
    return desired


async def desire(diego: Diego, desired: pb.DesiredLRP) -> pb.DesiredLRPLifecycleResponse:
    return await diego.call("/v1/desired_lrp/desire.r2", pb.DesireLRPRequest(desired_lrp=desired),
                            pb.DesiredLRPLifecycleResponse)


async def test_a_desire_then_a_read_returns_what_was_desired(h: Harness, diego: Diego) -> None:
    desired = lrp()
    assert not (await desire(diego, desired)).HasField("error")
    for path in ("/v1/desired_lrps/get_by_process_guid.r3", "/v1/desired_lrps/get_by_process_guid.r2"):
        read = (await diego.call(path, pb.DesiredLRPByProcessGuidRequest(process_guid=GUID),
                                 pb.DesiredLRPResponse)).desired_lrp
        assert read.modification_tag.epoch, read.modification_tag
        read.ClearField("modification_tag")
        assert read == desired, f"{path}: expected what was desired, saw {read}"
    own = (await h.http.get(f"/v1/desired_lrps/{GUID}")).json()
    assert own["command"] == ["/tmp/lifecycle/launcher", "app", "bundle exec rackup", ""], own
    assert own["env"] == {"LANG": "en_US.UTF-8", "SECRET": "s3cret"}
    assert own["artifacts"] == [{"digest": f"sha256:{CODE}", "url": "https://blobs.example.com/droplet.tgz",
                                 "dest": "home/vcap"}]
    assert (own["instances"], own["memory_mb"], own["disk_mb"]) == (2, 64, 128)
    assert own["placement_tags"] == ["blue"]
    assert own["health_check"]["type"] == "process" and own["health_check"]["timeout_s"] == 30.0
    actuals = await h.actuals(process_guid=GUID)
    assert sorted(a["index"] for a in actuals) == [0, 1]


async def test_the_r2_and_r3_lists_agree_and_filter(diego: Diego) -> None:
    await desire(diego, lrp())
    await desire(diego, lrp("other-app", 1, domain="other"))
    for path in ("/v1/desired_lrps/list.r3", "/v1/desired_lrps/list.r2"):
        every = (await diego.call(path, pb.DesiredLRPsRequest(), pb.DesiredLRPsResponse)).desired_lrps
        assert sorted(d.process_guid for d in every) == sorted([GUID, "other-app"]), path
        by_domain = (await diego.call(path, pb.DesiredLRPsRequest(domain="cf-apps"),
                                      pb.DesiredLRPsResponse)).desired_lrps
        assert [d.process_guid for d in by_domain] == [GUID], path
        by_guid = (await diego.call(path, pb.DesiredLRPsRequest(process_guids=["other-app"]),
                                    pb.DesiredLRPsResponse)).desired_lrps
        assert [d.process_guid for d in by_guid] == ["other-app"], path
    infos = (await diego.call("/v1/desired_lrp_scheduling_infos/list",
                              pb.DesiredLRPsRequest(domain="cf-apps"),
                              pb.DesiredLRPSchedulingInfosResponse)).desired_lrp_scheduling_infos
    assert [(i.desired_lrp_key.process_guid, i.instances, i.annotation, i.desired_lrp_resource.memory_mb)
            for i in infos] == [(GUID, 2, "etag-1", 64)]
    one = (await diego.call("/v1/desired_lrp_scheduling_infos/get_by_process_guid",
                            pb.DesiredLRPByProcessGuidRequest(process_guid=GUID),
                            pb.DesiredLRPSchedulingInfoByProcessGuidResponse)).desired_lrp_scheduling_info
    assert one == infos[0]
    routing = (await diego.call("/v1/desired_lrp_routing_infos/list",
                                pb.DesiredLRPsRequest(process_guids=[GUID]),
                                pb.DesiredLRPRoutingInfosResponse)).desired_lrp_routing_infos
    assert [dict(r.routes.routes) for r in routing] == [dict(lrp().routes.routes)]


async def test_actual_lrps_by_process_guids(diego: Diego) -> None:
    await desire(diego, lrp())
    await desire(diego, lrp("second", 3))
    await desire(diego, lrp("third", 1))
    found = (await diego.call("/v1/actual_lrps/list_by_process_guids",
                              pb.ActualLRPsByProcessGuidsRequest(process_guids=[GUID, "third", "absent"]),
                              pb.ActualLRPsResponse)).actual_lrps
    assert sorted((a.actual_lrp_key.process_guid, a.actual_lrp_key.index) for a in found) == [
        (GUID, 0), (GUID, 1), ("third", 0)]
    assert {a.state for a in found} == {"UNCLAIMED"}
    assert {a.actual_lrp_key.domain for a in found} == {"cf-apps"}
    index = (await diego.call("/v1/actual_lrps/list", pb.ActualLRPsRequest(process_guid="second", index=2),
                              pb.ActualLRPsResponse)).actual_lrps
    assert [a.actual_lrp_key.index for a in index] == [2]


async def test_domain_errors_are_answered_200_with_the_error_field(h: Harness, diego: Diego) -> None:
    await desire(diego, lrp())
    again = await desire(diego, lrp())
    assert (again.error.type, GUID in again.error.message) == (pb.Error.ResourceExists, True), again
    missing = await diego.call("/v1/desired_lrps/get_by_process_guid.r3",
                               pb.DesiredLRPByProcessGuidRequest(process_guid="nope"), pb.DesiredLRPResponse)
    assert missing.error.type == pb.Error.ResourceNotFound and not missing.HasField("desired_lrp")
    upload = lrp("uploads")
    upload.action.codependent_action.actions.add().upload_action.CopyFrom(pb.UploadAction(to="x"))
    refused = await desire(diego, upload)
    assert refused.error.type == pb.Error.InvalidRequest and "upload_action" in refused.error.message, refused
    unchecked = lrp("unchecked")
    unchecked.setup.download_action.checksum_algorithm = "md5"
    refused = await desire(diego, unchecked)
    assert refused.error.type == pb.Error.InvalidRequest and "sha256" in refused.error.message, refused
    garbage = await diego.http.post("/v1/desired_lrp/desire.r2", content=b"\xff\xff\xff",
                                    headers={"Content-Type": PROTOBUF})
    answer = pb.DesiredLRPLifecycleResponse.FromString(garbage.content)
    assert garbage.status_code == 200 and answer.error.type == pb.Error.InvalidProtobufMessage, answer
    unknown = await diego.http.post("/v1/no_such_endpoint", content=b"")
    assert unknown.status_code == 404, "a 404 is 'no such endpoint': Diego's clients fall back on it"
    listed = (await diego.call("/v1/desired_lrps/list.r3", pb.DesiredLRPsRequest(),
                               pb.DesiredLRPsResponse)).desired_lrps
    assert [d.process_guid for d in listed] == [GUID], "a refused desire wrote nothing"
    metrics = (await h.http.get("/metrics")).text
    assert 'route="/v1/desired_lrp/desire.r2"' in metrics, "Diego's requests are counted with the BBS's"


async def test_an_update_changes_routes_annotation_instances_and_no_version(h: Harness, diego: Diego) -> None:
    await desire(diego, lrp())
    update = pb.DesiredLRPUpdate(instances=3, annotation="etag-2")
    update.routes.routes["cf-router"] = b'[{"hostnames":["two.example.com"],"port":8080}]'
    answer = await diego.call("/v1/desired_lrp/update",
                              pb.UpdateDesiredLRPRequest(process_guid=GUID, update=update),
                              pb.DesiredLRPLifecycleResponse)
    assert not answer.HasField("error"), answer
    read = (await diego.call("/v1/desired_lrps/get_by_process_guid.r3",
                             pb.DesiredLRPByProcessGuidRequest(process_guid=GUID),
                             pb.DesiredLRPResponse)).desired_lrp
    assert (read.instances, read.annotation) == (3, "etag-2")
    assert dict(read.routes.routes) == dict(update.routes.routes) and read.action == lrp().action
    own = (await h.http.get(f"/v1/desired_lrps/{GUID}")).json()
    assert (own["instances"], own["version"]) == (3, 1), "routes and annotation make no new version"
    missing = await diego.call("/v1/desired_lrp/update", pb.UpdateDesiredLRPRequest(process_guid="nope"),
                               pb.DesiredLRPLifecycleResponse)
    assert missing.error.type == pb.Error.ResourceNotFound


async def test_a_reader_sees_env_values_masked(h: Harness, diego: Diego) -> None:
    await desire(diego, lrp())
    stored = (await h.http.get(f"/v1/desired_lrps/{GUID}")).json()["diego"]
    from bbs.diego.mapping import masked_message

    masked = pb.DesiredLRP.FromString(base64.b64decode(masked_message(stored, task=False)))
    assert [e.value for e in masked.environment_variables] == ["***"]
    assert [e.value for e in masked.action.codependent_action.actions[0].run_action.env] == ["***"]
    assert dict(masked.routes.routes) == dict(lrp().routes.routes), "routes are no secret"


async def test_domains_are_fresh_until_their_ttl(h: Harness, diego: Diego) -> None:
    for name, ttl in (("forever", 0), ("brief", 1), ("long", 3600)):
        answer = await diego.call("/v1/domains/upsert", pb.UpsertDomainRequest(domain=name, ttl=ttl),
                                  pb.UpsertDomainResponse)
        assert not answer.HasField("error"), answer
    listed = (await diego.call("/v1/domains/list", None, pb.DomainsResponse)).domains
    assert sorted(listed) == ["brief", "forever", "long"]

    async def brief_expired() -> bool:
        now = (await diego.call("/v1/domains/list", None, pb.DomainsResponse)).domains
        return expect(sorted(now) == ["forever", "long"], list(now))

    await eventually(brief_expired, 5.0, "the domain upserted with a TTL of 1 s no longer fresh")
    refused = await diego.call("/v1/domains/upsert", pb.UpsertDomainRequest(ttl=5), pb.UpsertDomainResponse)
    assert refused.error.type == pb.Error.InvalidRequest


async def test_tasks_r2_r3_resolving_and_delete(h: Harness, diego: Diego) -> None:
    definition = pb.TaskDefinition(root_fs="preloaded:cflinuxfs4", memory_mb=64, disk_mb=64, annotation="a")
    definition.action.run_action.CopyFrom(pb.RunAction(path="echo", args=["hi"]))
    request = pb.DesireTaskRequest(task_guid="t1", domain="cf-tasks", task_definition=definition)
    assert not (await diego.call("/v1/tasks/desire.r2", request, pb.TaskLifecycleResponse)).HasField("error")
    for path in ("/v1/tasks/get_by_task_guid.r3", "/v1/tasks/get_by_task_guid.r2"):
        task = (await diego.call(path, pb.TaskByGuidRequest(task_guid="t1"), pb.TaskResponse)).task
        assert (task.state, task.domain) == (pb.Task.Pending, "cf-tasks"), path
        assert task.task_definition == definition, path
    for path in ("/v1/tasks/list.r3", "/v1/tasks/list.r2"):
        tasks = (await diego.call(path, pb.TasksRequest(domain="cf-tasks"), pb.TasksResponse)).tasks
        assert [t.task_guid for t in tasks] == ["t1"], path
    early = await diego.call("/v1/tasks/resolving", pb.TaskGuidRequest(task_guid="t1"),
                             pb.TaskLifecycleResponse)
    assert early.error.type == pb.Error.InvalidStateTransition, early
    await diego.call("/v1/tasks/cancel", pb.TaskGuidRequest(task_guid="t1"), pb.TaskLifecycleResponse)
    resolving = await diego.call("/v1/tasks/resolving", pb.TaskGuidRequest(task_guid="t1"),
                                 pb.TaskLifecycleResponse)
    assert not resolving.HasField("error"), resolving
    task = (await diego.call("/v1/tasks/get_by_task_guid.r3", pb.TaskByGuidRequest(task_guid="t1"),
                             pb.TaskResponse)).task
    assert (task.state, task.failed) == (pb.Task.Resolving, True)
    await diego.call("/v1/tasks/delete", pb.TaskGuidRequest(task_guid="t1"), pb.TaskLifecycleResponse)
    gone = await diego.call("/v1/tasks/get_by_task_guid.r3", pb.TaskByGuidRequest(task_guid="t1"),
                            pb.TaskResponse)
    assert gone.error.type == pb.Error.ResourceNotFound
