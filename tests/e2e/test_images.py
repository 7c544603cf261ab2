"""End to end: desired LRPs and tasks naming an OCI image, against real registries
(tests/support/oci_registry.py) and a real cluster (TLS on). A private registry over TLS with htpasswd
(the BBS trusts its CA through --registry-ca) and a public one over plain http (--insecure-registry).
Two simulated cells: `dock` advertises the docker stack as a container executor's cell does, `plain`
does not.

- a tag is pinned to its digest when desired; moving the tag changes neither the stored digest nor the
  running instances' version; a PUT naming the tag again is a new version with the new digest;
- wrong, missing or right credentials; unknown repository, tag or digest: a 422 naming `image`;
- credentials in no answer (admin or reader), no event, no app story, no `vendue get app`, no log line;
- image work runs only on `dock`, work without an image on either; with no docker cell at all the
  placement error is Diego's `found no compatible cell for required rootfs`;
- `vendue push --image` with a credentials file or the environment; `vendue task run --image`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from common.tls import client_context
from deploy.cluster_topology import SimRepProcess
from tests.support.containers import containers_problem, free_subnets
from tests.support.oci_registry import HTTPD_IMAGE, Registry, build_image, oci_registry, tools_missing

from .conftest import E2ECluster, EventLog, _start_cluster, _stop_clusters, expect, hold_for, wait_for

MISSING = tools_missing()
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300),
              pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]

USER, PASSWORD = "deployer", "pw-that-must-never-show-1f3a"
SIZES = ("--memory-mb", "4096", "--disk-mb", "8192", "--containers", "50", "--zone", "z0")
DOCKER_CELL = SimRepProcess("rep-dock", ("--cell-id", "dock", "--stack", "cflinuxfs4", "--stack", "docker",
                                         *SIZES), (("dock", "z0"),))
PLAIN_CELL = SimRepProcess("rep-plain", ("--cell-id", "plain", *SIZES), (("plain", "z0"),))
ROOTFS_ERROR = "found no compatible cell for required rootfs"


@pytest.fixture
def transport() -> str:
    return "http"  # pinning happens in the BBS before anything travels: one transport is enough


@dataclass
class World:
    private: Registry  # TLS + htpasswd
    public: Registry  # plain http, no auth
    v1: str  # team/web:live's first digest
    v2: str  # the digest the tag is moved to
    c: E2ECluster
    reader: httpx.Client
    events: EventLog

    def ref(self, tag: str = "live") -> str:
        return f"{self.private.host}/team/web:{tag}"

    def creds(self, password: str = PASSWORD) -> dict[str, str]:
        return {"username": USER, "password": password}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("images")
    layout = build_image(tmp / "layout", "v1", **HTTPD_IMAGE)
    build_image(layout, "v2", **{**HTTPD_IMAGE, "env": {"PATH": "/bin", "GREETING": "v2"}}, index="v2\n")
    started: list[E2ECluster] = []
    with oci_registry(tmp / "private", tls=True, users={USER: PASSWORD}) as private, \
            oci_registry(tmp / "public") as public:
        v1 = private.push(layout, "v1", "team/web", "live")
        v2 = private.push(layout, "v2", "team/web", "v2")
        public.push(layout, "v1", "pub/web", "1")
        try:
            c = _start_cluster(started, tmp / "cluster", "http", cells=2, zones=1,
                               sim_reps=[DOCKER_CELL, PLAIN_CELL],
                               bbs_args=("--registry-ca", str(private.ca),
                                         "--insecure-registry", public.host))
            reader = httpx.Client(base_url=c.lc.bbs_url, timeout=10.0,
                                  verify=client_context(c.lc.issue_certificate("reader", "viewer")))
            events = c.follow_events()
            try:
                yield World(private, public, v1, v2, c, reader, events)
            finally:
                reader.close()
        finally:
            _stop_clusters(started)


def post(w: World, path: str, body: dict) -> httpx.Response:
    assert w.c.bbs is not None
    return w.c.bbs.http.post(path, json=body)


def desire(w: World, guid: str, image: dict, instances: int = 1, **fields: object) -> dict:
    answer = post(w, "/v1/desired_lrps", {"process_guid": guid, "instances": instances, "memory_mb": 64,
                                          "disk_mb": 64, "image": image, **fields})
    assert answer.status_code == 201, f"expected 201 desiring {guid}, saw {answer.status_code}: {answer.text}"
    return answer.json()


def refused(answer: httpx.Response, field: str, reason: str) -> str:
    assert answer.status_code == 422, f"expected 422, saw {answer.status_code}: {answer.text}"
    details = answer.json()["detail"]
    assert [d["loc"] for d in details] == [["body", field]], details
    assert reason in details[0]["msg"], f"expected {reason!r} in {details[0]['msg']!r}"
    return str(details[0]["msg"])


def running_cells(w: World, guid: str, instances: int) -> dict[int, dict]:
    assert w.c.bbs is not None

    def running() -> dict[int, dict]:
        actuals = [a for a in w.c.bbs.actuals(guid) if a["presence"] == "ORDINARY"]  # type: ignore[union-attr]
        found = {a["index"]: a for a in actuals if a["state"] == "RUNNING"}
        return expect(len(found) == instances and found, [(a["index"], a["state"]) for a in actuals])

    return wait_for(running, 30.0, f"{instances} instance(s) of {guid} running")


def test_a_tag_is_pinned_and_moving_it_changes_nothing_until_the_definition_names_it_again(
        world: World) -> None:
    w = world
    assert w.c.bbs is not None
    guid = w.c.guid("web")
    created = desire(w, guid, {"ref": w.ref(), "credentials": w.creds()}, instances=2)
    assert created["image"]["digest"] == w.v1
    # The image's config filled what the definition left out.
    assert created["command"] == HTTPD_IMAGE["entrypoint"] + HTTPD_IMAGE["cmd"]
    assert created["env"] == {"PATH": "/bin", "GREETING": "hi"} and created["ports"] == [8080]
    assert created["stack"] == "docker" and created["image"]["working_dir"] == "/www"
    running = running_cells(w, guid, 2)
    assert {a["cell_id"] for a in running.values()} == {"dock"}, running
    assert {a["version"] for a in running.values()} == {1}

    w.private.move_tag("team/web", "live", w.v2)

    def unchanged() -> bool:
        lrp = w.c.bbs.http.get(f"/v1/desired_lrps/{guid}").json()  # type: ignore[union-attr]
        actuals = w.c.bbs.actuals(guid)  # type: ignore[union-attr]
        versions = {a["version"] for a in actuals}
        return expect(lrp["image"]["digest"] == w.v1 and lrp["version"] == 1 and versions == {1},
                      (lrp["image"], versions))

    hold_for(unchanged, 3.0, "the pinned digest and version kept after the tag moved (convergence runs)")

    body = {"instances": 2, "memory_mb": 64, "disk_mb": 64, "rollout": {"max_in_flight": 2},
            "image": {"ref": w.ref(), "credentials": w.creds()}}
    change = w.c.bbs.http.put(f"/v1/desired_lrps/{guid}", json=body)
    assert change.status_code == 200, change.text
    assert change.json()["new_version"] is True
    lrp = change.json()["desired_lrp"]
    assert (lrp["image"]["digest"], lrp["version"], lrp["env"]["GREETING"]) == (w.v2, 2, "v2")
    wait_for(lambda: expect({a["version"] for a in running_cells(w, guid, 2).values()} == {2},
                            w.c.bbs.actuals(guid)), 30.0, "every instance on version 2")  # type: ignore[union-attr]
    again = w.c.bbs.http.put(f"/v1/desired_lrps/{guid}", json=body)
    assert again.status_code == 200 and again.json()["new_version"] is False, again.text


def test_credentials_are_checked_and_shown_to_nobody(world: World) -> None:
    w = world
    assert w.c.bbs is not None
    guid = w.c.guid("private")
    body = {"process_guid": guid, "memory_mb": 64, "disk_mb": 64}
    wrong = {"ref": w.ref("v2"), "credentials": w.creds("nope")}
    refused(post(w, "/v1/desired_lrps", {**body, "image": wrong}), "image", "refused the credentials")
    none = {"ref": w.ref("v2")}
    refused(post(w, "/v1/desired_lrps", {**body, "image": none}), "image", "requires credentials")
    assert w.c.bbs.http.get(f"/v1/desired_lrps/{guid}").status_code == 404  # nothing stored

    desire(w, guid, {"ref": w.ref("v2"), "credentials": w.creds()})
    task_guid = w.c.guid("task")
    task = post(w, "/v1/tasks", {"task_guid": task_guid, "memory_mb": 64, "disk_mb": 64,
                                 "image": {"ref": w.ref("v2"), "credentials": w.creds()}})
    assert task.status_code == 201, task.text
    assert PASSWORD not in task.text and task.json()["image"]["digest"] == w.v2
    running_cells(w, guid, 1)

    seen = {
        "admin GET": w.c.bbs.http.get(f"/v1/desired_lrps/{guid}").text,
        "admin list": w.c.bbs.http.get("/v1/desired_lrps").text,
        "reader GET": w.reader.get(f"/v1/desired_lrps/{guid}").text,
        "admin task": w.c.bbs.http.get(f"/v1/tasks/{task_guid}").text,
        "reader tasks": w.reader.get("/v1/tasks").text,
        "versions": w.c.bbs.http.get(f"/v1/desired_lrps/{guid}/versions").text,
    }
    for where, text in seen.items():
        assert w.v2 in text or where == "reader tasks", f"{where}: expected the pinned digest in {text[:300]}"
        assert PASSWORD not in text and USER not in text, f"{where} shows the credentials: {text[:500]}"
    story = w.c.cli("app", guid)
    assert story.code == 0 and PASSWORD not in story.output, story.output
    assert w.ref("v2") in story.stdout and w.v2[:19] in story.stdout, story.stdout
    got = w.c.cli("get", "app", guid)
    assert got.code == 0 and PASSWORD not in got.output, got.output
    image = yaml.safe_load(got.stdout)["applications"][0]["image"]
    assert image == {"ref": w.ref("v2"), "digest": w.v2, "working_dir": "/www"}, image
    def created_event() -> bool:
        return expect(any(e.type == "desired_lrp_created" and guid in json.dumps(e.data)
                          for e in w.events.snapshot()), len(w.events.snapshot()))

    wait_for(created_event, 10.0, f"the event of {guid}'s creation")
    leaked = [e.type for e in w.events.snapshot()
              if PASSWORD in json.dumps(e.data) or USER in json.dumps(e.data)]
    assert not leaked, f"events holding the credentials: {leaked}"
    logs = Path(w.c.lc.data_dir) / "logs"
    for log in sorted(logs.glob("*.log")):
        assert PASSWORD not in log.read_text(errors="replace"), f"{log} holds the registry password"


@pytest.mark.parametrize(("ref", "reason"), [
    ("{private}/team/nosuch:live", "not found"),
    ("{private}/team/web:nosuchtag", "MANIFEST_UNKNOWN"),
    ("{private}/team/web@sha256:" + "0" * 64, "not found"),
    ("127.0.0.1:1/team/web:1", "unreachable"),
    ("{public}/pub/web:1", ""),  # the plain-http registry, --insecure-registry: pinned
])
def test_what_cannot_be_pinned_is_a_422_naming_image(world: World, ref: str, reason: str) -> None:
    w = world
    guid = w.c.guid("bad")
    ref = ref.format(private=w.private.host, public=w.public.host)
    answer = post(w, "/v1/desired_lrps", {"process_guid": guid, "memory_mb": 64, "disk_mb": 64,
                                          "image": {"ref": ref, "credentials": w.creds()}})
    if not reason:
        assert answer.status_code == 201, answer.text
        assert answer.json()["image"]["digest"].startswith("sha256:"), answer.text
        return
    refused(answer, "image", reason)
    assert w.c.bbs is not None and w.c.bbs.http.get(f"/v1/desired_lrps/{guid}").status_code == 404
    task = post(w, "/v1/tasks", {"task_guid": guid, "memory_mb": 64, "disk_mb": 64,
                                 "image": {"ref": ref, "credentials": w.creds()}})
    refused(task, "image", reason)


def test_an_image_whose_config_runs_nothing_needs_a_command(world: World, tmp_path: Path) -> None:
    w = world
    layout = build_image(tmp_path / "layout", "bare")  # no entrypoint, no cmd
    w.public.push(layout, "bare", "pub/bare", "1")
    body = {"process_guid": w.c.guid("bare"), "memory_mb": 64, "disk_mb": 64,
            "image": {"ref": f"{w.public.host}/pub/bare:1"}}
    refused(post(w, "/v1/desired_lrps", body), "command", "neither an entrypoint nor a cmd")
    refused(post(w, "/v1/desired_lrps", {**body, "image": None}), "command", "a command is required")
    created = desire(w, w.c.guid("bare"), body["image"], command=["/bin/httpd", "-f"])
    assert created["command"] == ["/bin/httpd", "-f"]


def test_image_work_only_on_docker_cells_and_other_work_on_either(world: World) -> None:
    w = world
    assert w.c.bbs is not None
    image = w.c.guid("img")
    desire(w, image, {"ref": f"{w.public.host}/pub/web:1"}, instances=4)
    plain = w.c.guid("plain")
    w.c.bbs.desire(plain, 4, memory_mb=64, disk_mb=64, command=["/bin/true"])
    assert {a["cell_id"] for a in running_cells(w, image, 4).values()} == {"dock"}
    assert {a["cell_id"] for a in running_cells(w, plain, 4).values()} == {"dock", "plain"}


def test_with_no_docker_cell_image_work_waits_with_diegos_rootfs_error(
        world: World, tmp_path: Path) -> None:
    started: list[E2ECluster] = []
    try:
        c = _start_cluster(started, tmp_path / "nodocker", "http", cells=1, zones=1, sim_reps=[PLAIN_CELL],
                           bbs_args=("--insecure-registry", world.public.host))
        assert c.bbs is not None
        guid = c.guid("img")
        image = {"ref": f"{world.public.host}/pub/web:1"}
        answer = c.bbs.http.post("/v1/desired_lrps", json={
            "process_guid": guid, "memory_mb": 64, "disk_mb": 64, "image": image})
        assert answer.status_code == 201, answer.text

        def placement_error() -> str:
            errors = {a["placement_error"] for a in c.bbs.actuals(guid)}  # type: ignore[union-attr]
            return expect(len(errors) == 1 and str(errors.pop()).startswith(ROOTFS_ERROR), errors)

        wait_for(placement_error, 30.0, "the instance's placement error")
        task_guid = c.guid("task")
        task = c.bbs.http.post("/v1/tasks", json={"task_guid": task_guid, "memory_mb": 64, "disk_mb": 64,
                                                  "image": {"ref": f"{world.public.host}/pub/web:1"}})
        assert task.status_code == 201, task.text
        wait_for(lambda: expect(c.bbs.task(task_guid)["failure_reason"].startswith(ROOTFS_ERROR),  # type: ignore[union-attr]
                                c.bbs.task(task_guid)), 60.0, "the task failed for want of a docker cell")  # type: ignore[union-attr]
    finally:
        _stop_clusters(started)


def test_the_cli_pushes_an_image_with_credentials_from_a_file_or_the_environment(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = world
    credentials = tmp_path / "registry.json"
    credentials.write_text(json.dumps({"username": USER, "password": PASSWORD}))
    credentials.chmod(0o600)
    name = w.c.guid("cliweb")
    pushed = w.c.cli("push", name, "--image", w.ref("v2"), "--registry-credentials-file", str(credentials),
                     "-m", "64", "-d", "64", "--wait")
    assert pushed.code == 0, pushed.output
    assert w.v2[:19] in pushed.stdout and PASSWORD not in pushed.output, pushed.output
    running_cells(w, name, 1)
    # Pushed again unchanged: sent again (the tag might have moved), nothing changes.
    again = w.c.cli("push", name, "--image", w.ref("v2"), "--registry-credentials-file", str(credentials),
                    "-m", "64", "-d", "64")
    assert again.code == 0 and "nothing changed" in again.stdout, again.output
    wrong = tmp_path / "wrong"
    wrong.write_text(f"{USER}:not-it\n")
    refused_push = w.c.cli("push", w.c.guid("cliwrong"), "--image", w.ref("v2"),
                           "--registry-credentials-file", str(wrong))
    assert refused_push.code == 2 and "--image" in refused_push.stderr, refused_push.output
    assert "refused the credentials" in refused_push.stderr, refused_push.output

    monkeypatch.setenv("VENDUE_REGISTRY_USERNAME", USER)
    monkeypatch.setenv("VENDUE_REGISTRY_PASSWORD", PASSWORD)
    ran = w.c.cli("task", "run", "--image", w.ref("v2"), "-m", "64", "-d", "64", "--", "/bin/true",
                  timeout=60.0)
    assert ran.code == 0 and "succeeded" in ran.stdout, ran.output
    monkeypatch.delenv("VENDUE_REGISTRY_PASSWORD")
    half = w.c.cli("push", w.c.guid("half"), "--image", w.ref("v2"))
    assert half.code == 2 and "VENDUE_REGISTRY_PASSWORD" in half.stderr, half.output


def test_a_docker_rootfs_through_diegos_api_is_pinned_and_keeps_no_credentials(world: World) -> None:
    from bbs.diego.pb import diego_pb2 as pb
    from tests.support.diego import DiegoClient

    w = world
    assert w.c.bbs is not None and w.c.lc.diego_url, "the cluster serves Diego's API"
    client = DiegoClient(w.c.lc.diego_url, client_context(w.c.lc.issue_certificate("cf", "cc-images")))
    guid = w.c.guid("cf")
    try:
        lrp = pb.DesiredLRP(
            process_guid=guid, domain="cf-apps", instances=1, memory_mb=64, disk_mb=64,
            root_fs=f"docker:///{w.ref('v2')}", image_username=USER, image_password=PASSWORD,
            action=pb.Action(run_action=pb.RunAction(path="/bin/sh", args=["-c", "exec httpd -f -p $PORT"])))
        answer = client.call("/v1/desired_lrp/desire.r2", pb.DesireLRPRequest(desired_lrp=lrp),
                             pb.DesiredLRPLifecycleResponse)
        assert not answer.HasField("error"), answer.error
        stored = w.c.bbs.http.get(f"/v1/desired_lrps/{guid}").json()
        assert (stored["image"]["digest"], stored["stack"]) == (w.v2, "docker"), stored
        assert PASSWORD.encode() not in base64.b64decode(stored["diego"]), "the kept Diego message"
        assert {a["cell_id"] for a in running_cells(w, guid, 1).values()} == {"dock"}
        bad = pb.DesiredLRP()
        bad.CopyFrom(lrp)
        bad.process_guid, bad.image_password = w.c.guid("cfbad"), "wrong"
        refused_answer = client.call("/v1/desired_lrp/desire.r2", pb.DesireLRPRequest(desired_lrp=bad),
                                     pb.DesiredLRPLifecycleResponse)
        assert refused_answer.error.type == pb.Error.InvalidRequest, refused_answer
        assert "refused the credentials" in refused_answer.error.message, refused_answer.error.message
    finally:
        client.close()


@pytest.mark.skipif(containers_problem() is not None, reason=f"no containers here: {containers_problem()}")
def test_an_image_with_nothing_but_its_ref_runs_its_entrypoint_in_a_container(
        world: World, make_cluster: Any) -> None:
    """The whole way: the BBS pins the tag and fills command, env and port from the image's config; a
    container cell pulls the pinned digest with the credentials and runs it; it answers HTTP."""
    w = world
    c: E2ECluster = make_cluster(cells=1, zones=1, executor="container", container_subnets=free_subnets(1),
                                 bbs_args=["--registry-ca", str(w.private.ca)],
                                 rep_args=["--registry-ca", str(w.private.ca), "--stop-grace", "1"])
    assert c.bbs is not None
    guid = c.guid("whole")
    answer = c.bbs.http.post("/v1/desired_lrps", json={
        "process_guid": guid, "memory_mb": 64, "disk_mb": 64,
        "image": {"ref": w.ref("v2"), "credentials": w.creds()}})
    assert answer.status_code == 201, answer.text
    assert answer.json()["image"]["digest"] == w.v2 and answer.json()["ports"] == [8080], answer.text
    (instance,) = running_cells(w_with(c, w), guid, 1).values()
    index = httpx.get(f"http://{instance['address']}/", timeout=5.0)
    assert (index.status_code, index.text) == (200, "v2\n"), index.text
    assert c.bbs.http.get(f"/v1/desired_lrps/{guid}").json()["env"]["GREETING"] == "v2"


def w_with(c: E2ECluster, w: World) -> World:
    """`w` with another cluster's clients (running_cells reads `w.c`)."""
    return World(w.private, w.public, w.v1, w.v2, c, w.reader, w.events)
