"""The container executor end to end: a real registry (tests/support/oci_registry.py), a real cluster
(LocalCluster, TLS on) whose reps run `--executor container` as root, runc and the CNI plugins; skipped, with
the reason, where this machine cannot run containers.

An image serving HTTP runs on several cells and answers on its mapped host ports; inside, a container sees
only its own processes, neither a host file nor a host loopback service, and runs under a uid that is not
the host's root; over its memory it crashes with the process executor's reason; its writes stop at its disk
quota; its pid 1 is tini, which ends an app without a SIGTERM handler at the stop's SIGTERM and reaps its
orphans; a rep killed with `kill -9` and started again leaves nothing of its old containers.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rep.oci_spec import INIT_PATH
from tests.support.containers import (
    HOST_SECRET,
    HostSecretHandler,
    container_leftovers,
    containers_problem,
    free_subnets,
    uid_of,
)
from tests.support.oci_registry import (
    HTTPD_IMAGE,
    INDEX_TEXT,
    Registry,
    build_image,
    oci_registry,
    tools_missing,
)

from .conftest import E2ECluster, all_running, app_processes, expect, hold_for, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PROBLEM = containers_problem() or tools_missing()
containers = pytest.mark.skipif(PROBLEM is not None, reason=f"this machine cannot run containers: {PROBLEM}")


@pytest.fixture
def transport() -> str:
    """Containers are the rep's own business: one transport is enough."""
    return "http"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Registry, str]]:
    """A plain-http registry holding the httpd image: (registry, its digest)."""
    if PROBLEM is not None:
        pytest.skip(f"this machine cannot run containers: {PROBLEM}")
    work = tmp_path_factory.mktemp("registry")
    with oci_registry(work / "registry") as reg:
        layout = build_image(work / "layout", "web", **HTTPD_IMAGE)
        yield reg, reg.push(layout, "web", "team/web", "1")


def container_cluster(make_cluster: Callable[..., E2ECluster], reg: Registry, cells: int, zones: int,
                      *rep_args: str) -> E2ECluster:
    return make_cluster(cells=cells, zones=zones, executor="container", container_subnets=free_subnets(cells),
                        bbs_args=["--insecure-registry", reg.host],  # the BBS pins the ref (bbs/images.py)
                        rep_args=["--insecure-registry", reg.host, "--stop-grace", "1", *rep_args])


def desire_image(c: E2ECluster, reg: Registry, guid: str, instances: int, script: str | None = None,
                 **fields: Any) -> None:
    """The httpd image, team/web:1 (the BBS pins its digest and fills env, working dir and port from its
    config; the command is given: the image's, or its shell running `script`)."""
    assert c.bbs is not None
    command = [*HTTPD_IMAGE["entrypoint"], script or HTTPD_IMAGE["cmd"][0]]
    body = {"image": {"ref": f"{reg.host}/team/web:1"}, "command": command, "ports": [8080], **fields}
    c.bbs.desire(guid, instances, **body)


def running(c: E2ECluster, guid: str, instances: int) -> list[dict]:
    assert c.bbs is not None
    actuals = c.bbs.actuals(guid)
    up = [a for a in actuals if a["state"] == "RUNNING"]
    return expect(len(up) == instances and up,
                  [(a["index"], a["state"], a.get("crash_reason"), a.get("cell_id")) for a in actuals])


def fetch(address: str, path: str = "/") -> str:
    answer = httpx.get(f"http://{address}{path}", timeout=5.0)
    answer.raise_for_status()
    return answer.text


@containers
def test_an_image_runs_over_cells_and_answers_on_its_mapped_ports(
    make_cluster: Callable[..., E2ECluster], registry: tuple[Registry, str],
) -> None:
    reg, digest = registry
    c = container_cluster(make_cluster, reg, 2, 2)
    cells = c.cli("cells")
    assert cells.code == 0 and "runc" in cells.stdout, cells.output
    assert c.bbs is not None
    assert all("docker" in cell["stacks"] for cell in c.bbs.cells()), c.bbs.cells()

    web = c.guid("web")
    desire_image(c, reg, web, 3)
    pinned = next(d for d in c.bbs.desired() if d["process_guid"] == web)["image"]["digest"]
    assert pinned == digest, f"the BBS pinned {pinned}, expected the pushed {digest}"
    up = wait_for(lambda: running(c, web, 3), 120, "3 RUNNING instances of the image")
    assert {a["cell_id"] for a in up} == {"cell-0", "cell-1"}, [a["cell_id"] for a in up]
    for a in up:
        host_port = a["ports"][0]["host_port"]
        assert a["ports"][0]["container_port"] == 8080, a["ports"]
        assert host_port != 8080 and a["address"].endswith(f":{host_port}"), a
        assert fetch(a["address"]) == INDEX_TEXT
    pids = app_processes(web)
    assert pids and all(uid_of(pid) != 0 for group in pids.values() for pid in group), pids

    # exec enters the container: its root filesystem, user, working dir and environment
    answer = c.cli("exec", web, "0", "--", "/bin/sh", "-c", "id -u; pwd; echo $PORT; cat index.html; exit 3")
    assert answer.code == 3, answer.output
    assert answer.stdout == f"0\n/www\n8080\n{INDEX_TEXT}", answer.output


def _loopback_service() -> tuple[http.server.ThreadingHTTPServer, int]:
    """A service on the host's loopback only, which no container should reach."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostSecretHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


@containers
def test_a_container_sees_only_itself(
    make_cluster: Callable[..., E2ECluster], registry: tuple[Registry, str], tmp_path: Path,
) -> None:
    reg, digest = registry
    marker = Path("/tmp") / f"vendue-host-marker-{os.getpid()}"
    marker.write_text("host only\n")
    server, port = _loopback_service()
    try:
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).text == HOST_SECRET, "it answers"
        c = container_cluster(make_cluster, reg, 1, 1)
        probe = c.guid("probe")
        # Once its httpd serves: its own server through its loopback (the control), then the host's.
        script = ("/bin/busybox ps -o pid,ppid,user,args > /tmp/ps.txt; "
                  f"cat {marker} > /tmp/marker.txt 2>&1; "
                  "id -u > /tmp/uid.txt; echo self > /tmp/self.txt; "
                  "(sleep 1; wget -q -O /tmp/control.txt http://127.0.0.1:$PORT/self.txt; "
                  f"wget -q -O - http://127.0.0.1:{port}/ > /tmp/loop.txt 2>&1; echo $? > /tmp/done.txt) & "
                  "exec httpd -f -p $PORT -h /tmp")
        desire_image(c, reg, probe, 1, script)
        (a,) = wait_for(lambda: running(c, probe, 1), 120, "the probe RUNNING")
        print(c.cli("logs", probe).output)  # shown when the test fails
        done = wait_for(lambda: fetch(a["address"], "/done.txt"), 30, "the probe's tries done")
        names = ("ps", "marker", "uid", "control", "loop")
        seen = {name: fetch(a["address"], f"/{name}.txt") for name in names}
        lines = [line for line in seen["ps"].splitlines()[1:] if line.strip()]
        # its own processes alone: the init (pid 1), its child the shell (later httpd) and the ps itself
        rows = [line.split(maxsplit=3) for line in lines]  # pid, ppid, user, args
        assert len(rows) == 3 and [r[:2] for r in rows] == [
            ["1", "0"], [rows[1][0], "1"], [rows[2][0], rows[1][0]]], seen["ps"]
        assert rows[0][3].startswith(f"{INIT_PATH} -g -- /bin/sh -c "), seen["ps"]
        assert rows[1][3].startswith("/bin/sh -c "), seen["ps"]
        assert rows[2][3] == "/bin/busybox ps -o pid,ppid,user,args", seen["ps"]
        assert "host only" not in seen["marker"], seen["marker"]
        assert seen["uid"].strip() == "0", "the container's root inside"
        assert seen["control"] == "self\n", "its own loopback answers"
        assert done.strip() != "0" and HOST_SECRET.strip() not in seen["loop"], (done, seen["loop"])
        pids = app_processes(probe)
        assert pids and all(uid_of(pid) != 0 for group in pids.values() for pid in group), pids
    finally:
        server.shutdown()
        server.server_close()
        marker.unlink(missing_ok=True)


@containers
def test_out_of_memory_and_disk_quota(
    make_cluster: Callable[..., E2ECluster], registry: tuple[Registry, str],
) -> None:
    reg, digest = registry
    c = container_cluster(make_cluster, reg, 1, 1)
    assert c.bbs is not None
    greedy = c.guid("greedy")
    desire_image(c, reg, greedy, 1, "x=$(/bin/busybox yes); sleep 600", memory_mb=32,
                 health_check={"type": "process"})

    def crashed() -> str:
        actuals = c.bbs.actuals(greedy) if c.bbs else []
        reasons = [a.get("crash_reason") for a in actuals if a.get("crash_count")]
        return expect(reasons and reasons[0], [(a["state"], a.get("crash_reason")) for a in actuals])

    reason = wait_for(crashed, 120, "the greedy container CRASHED")
    assert reason == "out of memory (killed by signal 9)", reason

    filler = c.guid("filler")
    desire_image(c, reg, filler, 1,
                 "cat /dev/zero > /www/big 2> /www/err.txt; ls -l /www/big > /www/size.txt; "
                 "exec httpd -f -p $PORT -h /www", disk_mb=64)
    (a,) = wait_for(lambda: running(c, filler, 1), 120, "the filler RUNNING")
    size = int(fetch(a["address"], "/size.txt").split()[4])
    assert 16 * 2**20 < size < 64 * 2**20, f"expected the write to stop short of 64 MB, saw {size} bytes"
    assert "space" in fetch(a["address"], "/err.txt").lower()


@containers
def test_a_rep_killed_and_restarted_leaves_nothing_of_its_containers(
    make_cluster: Callable[..., E2ECluster], registry: tuple[Registry, str],
) -> None:
    reg, digest = registry
    c = container_cluster(make_cluster, reg, 1, 1)
    web = c.guid("web")
    desire_image(c, reg, web, 2)
    before = wait_for(lambda: running(c, web, 2), 120, "2 RUNNING instances")
    data_dir = Path(c.lc.rep_data_dirs()[0])
    c.lc.kill("cell-0", signal.SIGKILL)
    left = container_leftovers(data_dir)
    assert any(x.startswith("runc container") for x in left), f"the killed rep's containers run on: {left}"
    old = [a["instance_guid"] for a in before]
    c.lc.restart("cell-0", timeout=60)
    after = wait_for(lambda: expect(
        (up := running(c, web, 2)) and not {a["instance_guid"] for a in up} & set(old) and up,
        "old instances"), 120, "2 new RUNNING instances")
    left = [x for x in container_leftovers(data_dir) if any(g in x for g in old)]
    assert not left, f"expected nothing of the killed containers, saw {left}"
    bridge = subprocess.run(["ip", "-o", "link", "show", "type", "veth"], capture_output=True, text=True)
    assert len(after) == 2 and bridge.returncode == 0
    for a in after:
        assert fetch(a["address"]) == INDEX_TEXT
    c.lc.stop()
    assert container_leftovers(data_dir) == [], "a cluster stopped leaves nothing"


@containers
def test_an_image_gone_from_the_registry_crashes_its_instance_and_a_private_one_pulls_over_tls(
    make_cluster: Callable[..., E2ECluster], tmp_path: Path,
) -> None:
    with oci_registry(tmp_path / "private", tls=True, users={"alice": "s3cret"}) as reg:
        layout = build_image(tmp_path / "layout", "web", **HTTPD_IMAGE)
        reg.push(layout, "web", "team/web", "1")
        other = reg.push(build_image(tmp_path / "layout", "other", **{**HTTPD_IMAGE, "index": "other\n"}),
                         "other", "team/other", "1")
        assert reg.ca is not None
        c = make_cluster(cells=1, zones=1, executor="container", container_subnets=free_subnets(1),
                         bbs_args=["--registry-ca", str(reg.ca)],
                         rep_args=["--registry-ca", str(reg.ca), "--stop-grace", "1"])
        assert c.bbs is not None
        alice = {"username": "alice", "password": "s3cret"}

        gone = c.guid("gone")  # pinned by the BBS, then deleted before any rep pulls it
        desire_image(c, reg, gone, 0, image={"ref": f"{reg.host}/team/other:1", "credentials": alice})
        reg.delete_manifest("team/other", other)
        c.bbs.scale(gone, 1)

        def crash_reason() -> str:
            actuals = c.bbs.actuals(gone) if c.bbs else []
            reasons = [a.get("crash_reason") for a in actuals if a.get("crash_count")]
            return expect(reasons and reasons[0], [(a["state"], a.get("crash_reason")) for a in actuals])

        reason = wait_for(crash_reason, 120, "the instance of the deleted image CRASHED")
        assert reason.startswith(f"image {reg.host}/team/other@{other[:19]}"), reason
        assert "not found" in reason, reason

        good = c.guid("good")
        desire_image(c, reg, good, 1,
                     image={"ref": f"{reg.host}/team/web:1", "credentials": alice, "working_dir": "/www"})
        (a,) = wait_for(lambda: running(c, good, 1), 120, "the private image RUNNING")
        assert fetch(a["address"]) == INDEX_TEXT


@containers
def test_a_task_runs_in_its_image_and_work_without_an_image_runs_beside(
    make_cluster: Callable[..., E2ECluster], registry: tuple[Registry, str],
) -> None:
    reg, digest = registry
    c = container_cluster(make_cluster, reg, 1, 1)
    assert c.bbs is not None
    task = c.guid("task")
    c.bbs.create_task(task, ["/bin/sh", "-c", "cat /www/index.html; id -u"], stack="docker",
                      image={"ref": f"{reg.host}/team/web:1"})
    done = wait_for(lambda: expect((t := c.bbs.task(task) if c.bbs else {})["state"] == "COMPLETED" and t,
                                   "not completed"), 120, "the task COMPLETED")
    assert not done["failed"] and done["result"] == INDEX_TEXT + "0\n", done

    plain = c.guid("plain")
    c.bbs.desire(plain, 1)  # APP_COMMAND, no image: a process on the container cell
    wait_for(lambda: all_running(c.bbs, plain, 1), 120, "the app without an image RUNNING")


@containers
def test_egress_denied_per_cell(
    make_cluster: Callable[..., E2ECluster], registry: tuple[Registry, str],
) -> None:
    """cell-0 denies egress, cell-1 allows it: a container on each tries the web container on the other
    (beyond its own bridge, through the host: all traffic stays in namespaces this test made)."""
    reg, digest = registry
    c = container_cluster(make_cluster, reg, 2, 2)
    c.lc.kill("cell-0", signal.SIGKILL)
    c.lc._component("cell-0").args.extend(["--container-egress", "deny"])
    c.lc.restart("cell-0", timeout=60)
    assert c.bbs is not None
    web = c.guid("web")
    desire_image(c, reg, web, 2)
    up = wait_for(lambda: running(c, web, 2), 120, "2 RUNNING web instances")
    ips = {a["cell_id"]: _container_ip(a["instance_guid"]) for a in up}
    assert set(ips) == {"cell-0", "cell-1"}, ips

    probe = c.guid("probe")
    # busybox wget has no working timeout (-T crashes it): in the background, while httpd serves.
    script = (f'if [ "$CELL_ID" = cell-0 ]; then other={ips["cell-1"]}; else other={ips["cell-0"]}; fi; '
              "(wget -q -O - http://$other:8080/ > /tmp/got.txt 2> /tmp/err.txt) & "
              "exec httpd -f -p $PORT -h /tmp")
    desire_image(c, reg, probe, 2, script)
    probes = {a["cell_id"]: a for a in wait_for(lambda: running(c, probe, 2), 120, "2 RUNNING probes")}
    assert set(probes) == {"cell-0", "cell-1"}, probes
    wait_for(lambda: expect(fetch(probes["cell-1"]["address"], "/got.txt") == INDEX_TEXT, "nothing yet"), 30,
             "cell-1's container fetched from cell-0's: egress allowed")
    hold_for(lambda: expect(fetch(probes["cell-0"]["address"], "/got.txt") == "", "it fetched"), 3.0,
             "cell-0's container fetches nothing: egress denied")


# The stop grace of the init test: long, so that a stop that waits it out is far from one that does not.
INIT_GRACE_S = 30.0


@containers
def test_the_init_ends_an_app_without_a_sigterm_handler_at_once_and_reaps_its_orphans(
    make_cluster: Callable[..., E2ECluster], registry: tuple[Registry, str],
) -> None:
    """`sleep` handles no SIGTERM: as a PID namespace's init it would ignore the stop's, and never wait for
    the orphan `sleep 2` its shell leaves it. Under tini it is an ordinary child: both work."""
    reg, digest = registry
    c = container_cluster(make_cluster, reg, 1, 1, "--stop-grace", str(int(INIT_GRACE_S)))
    assert c.bbs is not None
    app = c.guid("sleeper")
    desire_image(c, reg, app, 1, "sh -c 'sleep 2 &'; exec sleep 1017", health_check={"type": "process"})
    wait_for(lambda: running(c, app, 1), 120, "the sleeper RUNNING")

    def pids() -> tuple[int, int]:
        procs = app_processes(app).get(0, [])
        init = [p for p in procs if _status(p).get("NSpid", "").split()[-1:] == ["1"]]
        main = [p for p in procs if _cmdline(p) == [b"sleep", b"1017"]]
        return expect(len(init) == 1 and len(main) == 1 and (init[0], main[0]),
                      {p: (_cmdline(p), _status(p).get("NSpid")) for p in procs})

    init, main = wait_for(pids, 30, "the container's pid 1 and its `sleep 1017`")
    assert _cmdline(init)[:3] == [INIT_PATH.encode(), b"-g", b"--"], _cmdline(init)
    assert _status(main).get("PPid") == str(init), "the app is the init's child"

    def orphans_reaped() -> bool:
        # The init's children but the app, and the app's (a zombie shows here until its parent waits).
        others = [p for p in _children(init) + _children(main) if p != main]
        left = {p: (_status(p).get("State"), _cmdline(p)) for p in others}
        return expect(not left, f"children of the init and the app besides the app: {left}")

    wait_for(orphans_reaped, 15, "the orphaned `sleep 2` ended and reaped")

    began = time.monotonic()
    assert c.bbs.http.delete(f"/v1/desired_lrps/{app}").status_code == 204
    wait_for(lambda: expect(not app_processes(app), app_processes(app)), INIT_GRACE_S + 30,
             "the sleeper's processes gone")
    took = time.monotonic() - began
    assert took < INIT_GRACE_S / 2, (
        f"expected the stop well within the {INIT_GRACE_S:.0f} s grace (the init forwards SIGTERM): under "
        f"{INIT_GRACE_S / 2:.0f} s; saw {took:.1f} s")


def _status(pid: int) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and _status(int(e)).get("PPid") == str(pid)]


def _container_ip(instance_guid: str) -> str:
    for ns in Path("/var/run/netns").iterdir():
        if ns.name.endswith(instance_guid):
            out = subprocess.run(["ip", "-n", ns.name, "-4", "-o", "addr", "show", "eth0"],
                                 capture_output=True, text=True).stdout
            return out.split()[3].split("/")[0]
    raise AssertionError(f"no network namespace for {instance_guid}")
