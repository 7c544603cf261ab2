"""`vendue up --executor container` before anything starts: each cell's own subnet and bridge out of the
cluster's --container-subnet, the registry flags reaching the BBS and the reps, and the one-line refusals
(a machine that cannot run containers, a subnet without room or already in use here)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from rep.cni import bridge_of
from rep.isolation import rep_key

from . import cluster, cluster_cmd
from .cli import _register, app
from .cluster_topology import Options, plan, split_container_subnet

_register()


def test_the_cluster_subnet_splits_into_a_share_per_cell_that_never_overlaps():
    assert split_container_subnet("10.244.0.0/16", 3) == ["10.244.0.0/24", "10.244.1.0/24", "10.244.2.0/24"]
    assert split_container_subnet("10.244.0.0/24", 1) == ["10.244.0.0/24"]
    shares = split_container_subnet("10.200.0.0/22", 5)  # no room for a /24 each: an equal smaller share
    assert shares == ["10.200.0.0/25", "10.200.0.128/25", "10.200.1.0/25", "10.200.1.128/25",
                      "10.200.2.0/25"], shares
    networks = [ipaddress.IPv4Network(s) for s in split_container_subnet("10.9.0.0/20", 16)]
    assert all(n.subnet_of(ipaddress.IPv4Network("10.9.0.0/20")) for n in networks), networks
    assert not any(a.overlaps(b) for i, a in enumerate(networks) for b in networks[i + 1:]), networks


@pytest.mark.parametrize(("subnet", "cells", "expected"), [
    ("10.244.0.0/28", 3, "--container-subnet: 10.244.0.0/28 has room for 2 cell(s) of at least /29, not 3"),
    ("10.244.0.0/30", 1, "--container-subnet: 10.244.0.0/30 has room for 0 cell(s)"),
    ("10.244.0.1/16", 1, "--container-subnet: expected an IPv4 subnet (CIDR, e.g. 10.244.0.0/16), got "
                         "'10.244.0.1/16'"),
    ("fd00::/64", 1, "--container-subnet: expected an IPv4 subnet"),
])
def test_a_subnet_without_room_or_not_a_subnet_is_refused_naming_the_flag(subnet: str, cells: int,
                                                                         expected: str):
    with pytest.raises(ValueError) as refused:
        split_container_subnet(subnet, cells)
    assert str(refused.value).startswith(expected), str(refused.value)


def test_every_rep_gets_its_own_subnet_bridge_and_data_dir_and_the_registry_flags(tmp_path: Path):
    subnets = split_container_subnet("10.244.0.0/16", 3)
    registry = ["--insecure-registry", "127.0.0.1:5000"]
    for ha in (False, True):
        planned = plan(Options(
            data_dir=tmp_path, cells=3, zones=2, executor="container", isolation="cgroups",
            cell_memory_mb=512, cell_disk_mb=512, cell_containers=250, bbs_args=registry, auctioneer_args=(),
            rep_args=registry, sim_cells_per_process=None, sim_reps=(), ha=ha, container_subnets=subnets,
        ), lambda name, port: f"https://127.0.0.1:{port}")
        reps = [c for c in planned.components.values() if c.cells]
        bbses = [c for c in planned.components.values() if c.name.startswith("bbs")]
        assert len(reps) == 3 and len(bbses) == (2 if ha else 1), list(planned.components)
        given = [c.args[c.args.index("--container-subnet") + 1] for c in reps]
        assert given == subnets, given
        assert all(c.args[c.args.index("--executor") + 1] == "container" for c in reps)
        data_dirs = {c.data_dir for c in reps}
        bridges = {bridge_of(rep_key(Path(d))) for d in data_dirs if d}
        assert len(data_dirs) == len(bridges) == 3, (data_dirs, bridges)
        assert all(len(b) <= 15 for b in bridges), bridges  # IFNAMSIZ
        for component in [*reps, *bbses]:  # the BBS pins digests: it asks the registry too
            at = component.args.index("--insecure-registry")
            assert component.args[at + 1] == "127.0.0.1:5000", (component.name, component.args)


def test_the_launcher_splits_the_default_subnet_when_given_none(tmp_path: Path):
    local = cluster.LocalCluster(tmp_path, cells=2, zones=1, executor="container")
    assert local.container_subnets == ("10.244.0.0/24", "10.244.1.0/24"), local.container_subnets
    assert "cell-1 10.244.1.0/24" in local.isolation_summary(), local.isolation_summary()


def invoke_up(tmp_path: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["up", "--data-dir", str(tmp_path / "d"), "--executor", "container",
                                    *args])


def test_a_machine_that_cannot_run_containers_is_refused_in_one_line_naming_what_is_missing(tmp_path: Path):
    # The rep's own check: no CNI plugins where --cni-path says (whatever else this machine lacks).
    result = invoke_up(tmp_path, "--cni-path", str(tmp_path / "no-plugins"))
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: --executor container: missing "), lines
    plugins = f"the CNI plugins bridge, host-local, portmap, loopback in {tmp_path / 'no-plugins'}"
    assert plugins in lines[0], lines
    assert not (tmp_path / "d").exists(), "nothing should be made before the check"


@pytest.mark.parametrize(("args", "expected"), [
    (["--container-subnet", "10.244.0.0/30"], "error: --container-subnet: 10.244.0.0/30 has room for 0"),
    (["--insecure-registry", "http://reg:5000"], "error: --insecure-registry: expected HOST or HOST:PORT"),
    (["--registry-ca", "/nonexistent/ca.pem"], "error: --registry-ca: cannot load /nonexistent/ca.pem"),
    (["--sim-cells-per-process", "2"], "error: --sim-cells-per-process: only with --executor sim"),
])
def test_bad_container_flags_exit_2_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  args: list[str], expected: str):
    monkeypatch.setattr(cluster_cmd, "containers_problem", lambda cni_path: None)
    result = invoke_up(tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(expected), result.stderr


def test_a_subnet_this_host_already_uses_is_refused_but_not_the_clusters_own_bridge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(cluster_cmd, "containers_problem", lambda cni_path: None)
    started: list[object] = []
    monkeypatch.setattr(cluster.LocalCluster, "start", lambda self, timeout: started.append(self) or self)
    own = bridge_of(rep_key((tmp_path / "d").resolve() / "cells" / "cell-1"))
    here = [("eth0", ipaddress.IPv4Interface("192.0.2.2/24")),
            (own, ipaddress.IPv4Interface("10.244.1.1/24"))]  # a bridge its own rep left, killed
    monkeypatch.setattr(cluster, "host_networks", lambda: here)
    local = cluster.LocalCluster(tmp_path / "d", cells=2, executor="container")
    assert local.container_subnet_clash() is None

    here.append(("docker0", ipaddress.IPv4Interface("10.244.1.1/16")))
    result = invoke_up(tmp_path, "--cells", "2")
    assert result.exit_code == 2, result.output
    assert result.stderr == ("error: --container-subnet: cell-0's 10.244.0.0/24 overlaps 10.244.1.1/16 on "
                             "docker0; choose another (--container-subnet CIDR)\n"), result.stderr
    assert not started, "refused before anything started"
