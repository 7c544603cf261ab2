from __future__ import annotations

import json
from pathlib import Path

import pytest

from rep.cni import CNIError, Network, _conf, address_of, missing_plugins


def network(egress: bool = True) -> Network:
    return Network("vendue-abc", "vdabc", "198.19.3.0/24", Path("/d/cni"), egress=egress)


def test_the_bridge_leases_from_the_cells_subnet() -> None:
    bridge, portmap = network().plugins()
    assert bridge["type"] == "bridge" and bridge["bridge"] == "vdabc"
    assert bridge["ipMasq"] is False, "one masquerade rule per cell (set_egress), not a chain per container"
    assert bridge["ipam"]["type"] == "host-local" and bridge["ipam"]["dataDir"] == "/d/cni"
    assert bridge["ipam"]["ranges"] == [[{"subnet": "198.19.3.0/24"}]]
    assert portmap["type"] == "portmap" and portmap["capabilities"] == {"portMappings": True}


def test_a_plugins_config_carries_the_port_mappings_and_the_previous_result() -> None:
    _, portmap = network().plugins()
    conf = json.loads(_conf(network(), portmap, [(24001, 8080)], {"ips": []}))
    assert conf["cniVersion"] == "1.0.0" and conf["name"] == "vendue-abc"
    assert conf["runtimeConfig"] == {"portMappings": [{"hostPort": 24001, "containerPort": 8080,
                                                       "protocol": "tcp"}]}
    assert conf["prevResult"] == {"ips": []}
    bridge = json.loads(_conf(network(), network().plugins()[0], [(1, 2)], None))
    assert "runtimeConfig" not in bridge and "prevResult" not in bridge


def test_the_containers_address_comes_from_the_result() -> None:
    result = {"ips": [{"address": "fd00::2/64"}, {"address": "198.19.3.7/24", "gateway": "198.19.3.1"}]}
    assert address_of(result) == "198.19.3.7"
    with pytest.raises(CNIError):
        address_of({"ips": []})


def test_missing_plugins_are_named(tmp_path: Path) -> None:
    (tmp_path / "bridge").write_text("")
    assert missing_plugins(tmp_path) == ["host-local", "portmap", "loopback"]
