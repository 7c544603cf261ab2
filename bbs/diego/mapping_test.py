"""The mapping between Diego's models and Vendue's, as pure functions (docs/diego-api.md, "Mapping")."""

from __future__ import annotations

import pytest

from bbs.diego.mapping import (
    Unsupported,
    decode_stored,
    diego_actual,
    diego_lrp,
    diego_task,
    lrp_body,
    nanos,
    task_body,
    updated_lrp,
)
from bbs.diego.pb import diego_pb2 as pb
from common.models import DesiredLRPCreate, TaskCreate

DIGEST = "ab" * 32


def run_lrp(**fields: object) -> pb.DesiredLRP:
    lrp = pb.DesiredLRP(process_guid="web", domain="cf-apps", instances=2, **fields)  # type: ignore[arg-type]
    lrp.action.run_action.CopyFrom(pb.RunAction(path="/bin/server", args=["-p", "8080"],
                                                env=[pb.EnvironmentVariable(name="A", value="run")]))
    return lrp


def test_a_run_action_becomes_the_command_and_env_the_run_actions_winning() -> None:
    lrp = run_lrp(environment_variables=[pb.EnvironmentVariable(name="A", value="lrp"),
                                         pb.EnvironmentVariable(name="B", value="b")])
    body = lrp_body(lrp)
    assert body["command"] == ["/bin/server", "-p", "8080"]
    assert body["env"] == {"A": "run", "B": "b"}
    assert body["health_check"] == {"type": "process"}
    DesiredLRPCreate.model_validate(body)  # Vendue takes it as it is


def test_a_run_action_inside_wrappers_is_found() -> None:
    lrp = pb.DesiredLRP(process_guid="web")
    inner = lrp.action.timeout_action.action.serial_action.actions
    inner.add().download_action.CopyFrom(pb.DownloadAction(to="app", checksum_algorithm="SHA256",
                                                           checksum_value=DIGEST, **{"from": "https://x/a.tgz"}))
    inner.add().try_action.action.run_action.path = "run"
    body = lrp_body(lrp)
    assert body["command"] == ["run"]
    assert body["artifacts"] == [{"digest": f"sha256:{DIGEST}", "url": "https://x/a.tgz", "dest": "app"}]


@pytest.mark.parametrize(("change", "says"), [
    (lambda lrp: lrp.action.Clear(), "action"),
    (lambda lrp: lrp.action.run_action.__setattr__("dir", "/app"), "run_action.dir"),
    (lambda lrp: lrp.setup.run_action.__setattr__("path", "x"), "setup"),
    (lambda lrp: lrp.setup.upload_action.__setattr__("to", "x"), "upload_action"),
    (lambda lrp: lrp.setup.download_action.__setattr__("to", "x"), "sha256"),
    (lambda lrp: lrp.__setattr__("root_fs", "windows:2019"), "root_fs"),
    (lambda lrp: lrp.image_layers.append(b"\n\x01x"), "image_layers"),
    (lambda lrp: lrp.volume_mounts.append(b"\n\x01x"), "volume_mounts"),
    (lambda lrp: lrp.sidecars.append(b"\n\x01x"), "sidecars"),
])
def test_what_vendue_cannot_honour_is_refused_naming_it(change, says: str) -> None:  # type: ignore[no-untyped-def]
    lrp = run_lrp()
    change(lrp)
    with pytest.raises(Unsupported, match=says):
        lrp_body(lrp)


def test_a_docker_rootfs_is_an_image_and_preloaded_a_stack() -> None:
    body = lrp_body(run_lrp(root_fs="docker:///cloudfoundry/diego-docker-app#latest", image_username="u",
                            image_password="p"))
    assert body["image"] == {"ref": "cloudfoundry/diego-docker-app:latest",
                             "credentials": {"username": "u", "password": "p"}}
    assert lrp_body(run_lrp(root_fs="preloaded:cflinuxfs4"))["stack"] == "cflinuxfs4"


def test_the_stored_message_reads_back_with_vendues_instances_and_tag() -> None:
    lrp = run_lrp(annotation="a", log_guid="lg", egress_rules=[b"\n\x03tcp"], ports=[8080])
    lrp.routes.routes["cf-router"] = b"[]"
    body = lrp_body(lrp)
    wire = {**body, "instances": 5, "modification_tag": {"epoch": "e", "index": 3}}
    read = diego_lrp(wire)
    assert (read.instances, read.modification_tag.epoch, read.modification_tag.index) == (5, "e", 3)
    read.instances, lrp.instances = 0, 0
    read.ClearField("modification_tag")
    assert read == lrp


def test_a_command_changed_through_vendue_replaces_the_stored_run_action() -> None:
    lrp = run_lrp()
    lrp.routes.routes["r"] = b"1"
    wire = {**lrp_body(lrp), "command": ["/bin/other"], "env": {"X": "1"}}
    read = diego_lrp(wire)
    assert (read.action.run_action.path, list(read.action.run_action.args)) == ("/bin/other", [])
    assert [(e.name, e.value) for e in read.action.run_action.env] == [("X", "1")]
    assert dict(read.routes.routes) == {"r": b"1"}, "the rest is kept"


def test_resources_changed_through_vendue_are_written_over_the_stored_message() -> None:
    lrp = run_lrp(memory_mb=0, disk_mb=512, ports=[8080], placement_tags=["a"])
    body = lrp_body(lrp)
    assert "memory_mb" not in body
    unchanged = diego_lrp({**body, "memory_mb": 256, "instances": 2})
    assert (unchanged.memory_mb, unchanged.disk_mb) == (0, 512), "Vendue's default for a Diego 0 reads as 0"
    changed = diego_lrp({**body, "memory_mb": 1024, "disk_mb": 2048, "ports": [9090], "placement_tags": []})
    assert (changed.memory_mb, changed.disk_mb, list(changed.ports)) == (1024, 2048, [9090])
    assert list(changed.placement_tags) == []


def test_an_lrp_desired_through_vendue_reads_as_one_run_action() -> None:
    wire = {"process_guid": "web", "domain": "vendue", "instances": 1, "command": ["sh", "-c", "x"],
            "env": {"K": "v"}, "memory_mb": 64, "disk_mb": 128, "ports": [8080], "stack": "cflinuxfs4",
            "artifacts": [{"digest": f"sha256:{DIGEST}", "url": None, "dest": "."}],
            "modification_tag": {"epoch": "e", "index": 0}}
    read = diego_lrp(wire)
    assert (read.root_fs, read.memory_mb, list(read.ports)) == ("preloaded:cflinuxfs4", 64, [8080])
    assert read.action.run_action.path == "sh" and read.setup.download_action.checksum_value == DIGEST
    masked = diego_lrp(wire, sees_env=False).action.run_action.env
    assert [(e.name, e.value) for e in masked] == [("K", "***")]


def test_an_update_changes_routes_annotation_and_metric_tags_only() -> None:
    lrp = run_lrp(annotation="a")
    update = pb.DesiredLRPUpdate(annotation="b")
    update.routes.routes["r"] = b"2"
    update.metric_tags["m"].static = "v"
    changed = updated_lrp(lrp, update)
    assert (changed.annotation, dict(changed.routes.routes)) == ("b", {"r": b"2"})
    assert changed.metric_tags["m"].static == "v"
    assert changed.action == lrp.action
    assert updated_lrp(lrp, pb.DesiredLRPUpdate()).annotation == "a", "an absent annotation changes nothing"


def test_actual_lrps_and_tasks_in_diegos_terms() -> None:
    since = "2026-11-29T09:00:00+00:00"
    actual = diego_actual({"process_guid": "web", "index": 1, "domain": "d", "instance_guid": "i",
                           "cell_id": "c", "zone": "z1", "state": "RUNNING", "presence": "EVACUATING",
                           "host": "10.0.0.1",
                           "ports": [{"container_port": 8080, "host_port": 61001}], "crash_count": 2,
                           "crash_reason": "exited 1", "since": since, "placement_error": "",
                           "modification_tag": {"epoch": "e", "index": 4}})
    assert (actual.state, actual.presence) == ("RUNNING", pb.ActualLRP.EVACUATING)
    assert actual.availability_zone == "z1"
    assert actual.routable and actual.since == nanos(since) == 1795942800 * 10**9
    assert actual.actual_lrp_net_info.ports[0].host_port == 61001
    unclaimed = diego_actual({"process_guid": "web", "index": 0, "state": "UNCLAIMED", "since": since,
                              "placement_error": "insufficient resources: memory"})
    assert not unclaimed.HasField("routable")
    assert unclaimed.placement_error == "insufficient resources: memory"

    definition = pb.TaskDefinition(result_file="/tmp/r", annotation="n")
    definition.action.run_action.path = "true"
    body = task_body("t1", "cf-tasks", definition)
    TaskCreate.model_validate(body)
    task = diego_task({**body, "state": "COMPLETED", "failed": True, "failure_reason": "cancelled",
                       "created_at": since, "result": "42"})
    assert (task.state, task.failed, task.result) == (pb.Task.Completed, True, "42")
    assert task.task_definition == definition


def test_a_masked_or_garbled_stored_message_is_none() -> None:
    assert decode_stored("***", pb.DesiredLRP()) is None
    assert decode_stored("not base64!", pb.DesiredLRP()) is None
    assert decode_stored(None, pb.DesiredLRP()) is None
