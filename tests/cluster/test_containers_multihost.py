"""The container executor on real network hosts (tests/cluster/multihost.py, `executor="container"`): each
cell's rep makes its CNI bridge, veths and port mappings in its own host's namespace, and pulls from the
registry on a host of its own.

An image serving HTTP runs 3 instances over 3 cells in 2 zones and answers on the address and port each
instance reports, from the root namespace (where the tests talk from) and from another cell's host; inside,
a container sees only its own processes, neither a file of the host nor a service on its host's loopback,
and runs under a uid that is not root on the host's side. Once the app is deleted, nothing of its
containers is left in any cell's namespace (veths, iptables rules) or on the machine (runc's state,
mounts, namespaces).

Needs root, `ip`, runc, the CNI plugins and the registry tools (skipped otherwise, saying why).
"""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from rep.oci_spec import INIT_PATH
from tests.e2e.conftest import BBS, app_processes, expect, wait_for
from tests.support.containers import (
    HOST_SECRET,
    HostSecretHandler,
    container_leftovers,
    containers_problem,
    uid_of,
)
from tests.support.oci_registry import HTTPD_IMAGE, INDEX_TEXT, build_image, tools_missing

from .multihost import MultiHostCluster

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

PROBLEM = containers_problem() or tools_missing()
CELLS = ("cell-0", "cell-1", "cell-2")  # zones z0, z1, z0 (round-robin)


@contextlib.contextmanager
def loopback_services(cluster: MultiHostCluster) -> Iterator[dict[str, int]]:
    """A service on each cell host's loopback alone (bound on the host's thread, in its namespace), which no
    container should reach: cell -> port."""
    servers = {cell: cluster.host(cell).run(
        lambda: http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostSecretHandler)) for cell in CELLS}
    for server in servers.values():
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {cell: server.server_address[1] for cell, server in servers.items()}
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def fetch(address: str, path: str = "/") -> str:
    answer = httpx.get(f"http://{address}{path}", timeout=5.0)
    answer.raise_for_status()
    return answer.text


def running(bbs: BBS, guid: str, instances: int) -> list[dict]:
    actuals = bbs.actuals(guid)
    up = [a for a in actuals if a["state"] == "RUNNING"]
    return expect(len(up) == instances and up,
                  [(a["index"], a["state"], a.get("crash_reason"), a.get("cell_id")) for a in actuals])


@pytest.mark.skipif(PROBLEM is not None, reason=f"this machine cannot run containers: {PROBLEM}")
def test_an_image_over_cell_hosts_answers_from_the_host_and_from_other_cells_and_sees_only_itself(
    multihost: Callable[..., MultiHostCluster], tmp_path: Path,
) -> None:
    cluster = multihost(cells=len(CELLS), zones=2, executor="container", rep_args=["--stop-grace", "1"])
    reg = cluster.registry
    assert reg is not None
    assert reg.host.split(":")[0] == cluster.host("registry").address, reg.host
    reg.push(build_image(tmp_path / "layout", "web", **HTTPD_IMAGE), "web", "team/web", "1")
    bbs = BBS(cluster.bbs_url, cluster.verify)
    zones = {cell["cell_id"]: cell["zone"] for cell in bbs.cells()}
    assert sorted(zones) == list(CELLS) and all("docker" in c["stacks"] for c in bbs.cells()), bbs.cells()

    marker = tmp_path / "host-marker"
    marker.write_text("host only\n")
    with loopback_services(cluster) as ports:
        for cell, port in ports.items():
            answer = cluster.host(cell).run(lambda port=port: fetch(f"127.0.0.1:{port}"))
            assert answer == HOST_SECRET, f"the service on {cell}'s loopback answers its host"
        # Before its httpd: what it sees; once it serves: its own server through its loopback (the control),
        # then its cell host's loopback service. All of it served from /www next to the image's index.
        loop_port = " ".join(f"{cell}) p={port};;" for cell, port in ports.items())
        script = (f"/bin/busybox ps -o pid,ppid,user,args > /www/ps.txt; "
                  f"cat {marker} > /www/marker.txt 2>&1; "
                  f'id -u > /www/uid.txt; echo self > /www/self.txt; case "$CELL_ID" in {loop_port} esac; '
                  "(sleep 1; wget -q -O /www/control.txt http://127.0.0.1:$PORT/self.txt; "
                  "wget -q -O - http://127.0.0.1:$p/ > /www/loop.txt 2>&1; echo $? > /www/done.txt) & "
                  "exec httpd -f -p $PORT -h /www")
        web = "web"
        bbs.desire(web, 3, image={"ref": f"{reg.host}/team/web:1"}, ports=[8080],
                   command=[*HTTPD_IMAGE["entrypoint"], script])
        up = wait_for(lambda: running(bbs, web, 3), 180, "3 RUNNING instances of the image")
        assert {zones[a["cell_id"]] for a in up} == {"z0", "z1"}, [(a["cell_id"], a["index"]) for a in up]

        for a in up:
            cell, address = a["cell_id"], a["address"]
            host_port = a["ports"][0]["host_port"]
            assert address == f"{cluster.host(cell).address}:{host_port}", (cell, a["address"], a["ports"])
            assert fetch(address) == INDEX_TEXT, f"{address} from the root namespace"
            other = next(c for c in CELLS if c != cell)
            seen = cluster.host(other).run(lambda address=address: fetch(address))
            assert seen == INDEX_TEXT, f"{address} (on {cell}) from {other}'s host: {seen!r}"

            done = wait_for(lambda address=address: fetch(address, "/done.txt"), 30,
                            f"the tries of {cell}'s container done")
            names = ("ps", "marker", "uid", "control", "loop")
            seen = {name: fetch(address, f"/{name}.txt") for name in names}
            lines = [line for line in seen["ps"].splitlines()[1:] if line.strip()]
            # its own processes alone: the init (pid 1), its child the shell (later httpd) and the ps itself
            rows = [line.split(maxsplit=3) for line in lines]  # pid, ppid, user, args
            assert len(rows) == 3 and [r[:2] for r in rows] == [
                ["1", "0"], [rows[1][0], "1"], [rows[2][0], rows[1][0]]], f"{cell}: {seen['ps']}"
            assert rows[0][3].startswith(f"{INIT_PATH} -g -- /bin/sh -c "), f"{cell}: {seen['ps']}"
            assert rows[2][3] == "/bin/busybox ps -o pid,ppid,user,args", f"{cell}: {seen['ps']}"
            assert "host only" not in seen["marker"], f"{cell}: {seen['marker']}"
            assert seen["uid"].strip() == "0", f"{cell}: the container's root inside, saw {seen['uid']}"
            assert seen["control"] == "self\n", f"{cell}: its own loopback answers, saw {seen['control']!r}"
            assert done.strip() != "0" and HOST_SECRET.strip() not in seen["loop"], (cell, done, seen["loop"])

        pids = cluster.instance_processes(web)  # each where its runc is: on its cell's host
        placed = {a["cell_id"] for a in up}
        assert {cell: sorted(group) for cell, group in pids.items()} == {
            cell: sorted(a["index"] for a in up if a["cell_id"] == cell) for cell in placed
        }, (pids, [(a["cell_id"], a["index"]) for a in up])
        data_dirs = {Path(d).name: Path(d) for d in cluster.rep_data_dirs()}
        assert cluster.network is not None
        for cell in placed:  # what the check below finds gone: there while they run
            there = container_leftovers(data_dirs[cell], cluster.network.link(cell).namespace)
            kinds = {item.split()[0] for item in there}
            assert {"runc", "veth", "iptables", "bridge"} <= kinds, f"{cell}'s namespace holds {there}"
            network = ("veth", "iptables", "bridge")
            in_root = [x for x in container_leftovers(data_dirs[cell]) if x.split()[0] in network]
            assert not in_root, f"expected {cell}'s network in its host's namespace alone, root has {in_root}"
        uids = {pid: uid_of(pid) for indexes in pids.values() for group in indexes.values() for pid in group}
        assert 0 not in uids.values(), f"expected no instance process under the host's root, saw {uids}"

    assert bbs.http.delete(f"/v1/desired_lrps/{web}").status_code == 204
    wait_for(lambda: expect(not bbs.actuals(web) and not app_processes(web), app_processes(web)), 60,
             "no instance of the deleted app, no process")

    def nothing_left() -> bool:
        left = {cell: container_leftovers(data_dirs[cell], cluster.network.link(cell).namespace,
                                          cell_level=False)
                for cell in CELLS if cluster.network is not None}
        return expect(not any(left.values()), left)

    wait_for(nothing_left, 30, "nothing of the deleted app's containers in the cells' namespaces")
    bbs.close()
