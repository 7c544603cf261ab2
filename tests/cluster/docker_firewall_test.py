"""The hosts' network on a host that runs Docker: Docker turns br_netfilter's bridge-nf-call-iptables on and
sets iptables' FORWARD policy to DROP, which drops every frame crossing any other bridge. This machine plays
Docker for the length of a test (`docker_like_firewall`); the network's own ACCEPT rule lets its hosts reach
each other, and is gone after `close()`. The previous policy and switch come back afterwards, also when the
test fails, and also after a run killed in between (the next one restores what the dead one saved).

Needs root, `ip` and `iptables` (skipped otherwise, saying why)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.polling import wait_for
from tests.support.reach import listen, probe

from . import netns
from .hosts import Host
from .multihost import MultiHostCluster, unavailable_reason
from .netns import BRIDGE_NF_CALL_IPTABLES, Network, iptables

pytestmark = [pytest.mark.timeout(180)]
SAVED_PREFIX = "vendue-firewall-"  # + the tag of the run that changed the firewall, + ".json"


def forward_policy() -> str:
    """iptables' FORWARD policy (ACCEPT or DROP), from `iptables -S FORWARD`'s `-P FORWARD <policy>`."""
    for line in iptables("-S", "FORWARD").splitlines():
        if line.startswith("-P FORWARD "):
            return line.split()[2]
    raise netns.NetworkError("iptables -S FORWARD printed no policy")


def restore(saved: dict[str, str]) -> None:
    iptables("-P", "FORWARD", saved["policy"])
    BRIDGE_NF_CALL_IPTABLES.write_text(saved["bridge_nf_call_iptables"])


def restore_killed_runs() -> None:
    """Put back the firewall that a run killed while it played Docker saved before it changed anything."""
    for path in Path(tempfile.gettempdir()).glob(f"{SAVED_PREFIX}*.json"):
        if netns.dead_tag(path.name.removeprefix(SAVED_PREFIX).removesuffix(".json")):
            restore(json.loads(path.read_text()))
            path.unlink()


@pytest.fixture
def docker_like_firewall() -> Iterator[None]:
    """Docker's firewall on this machine while the test runs: bridge-nf-call-iptables 1 (br_netfilter
    loaded with modprobe if it is not) and FORWARD's policy DROP; both restored afterwards."""
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    if shutil.which("iptables") is None:
        pytest.skip("needs `iptables` to play Docker's firewall (apt-get install iptables)")
    loaded = False
    if not BRIDGE_NF_CALL_IPTABLES.exists() and shutil.which("modprobe") is not None:
        loaded = subprocess.run(["modprobe", "br_netfilter"], capture_output=True, timeout=30).returncode == 0
    if not BRIDGE_NF_CALL_IPTABLES.exists():
        pytest.skip("no br_netfilter here (built in or loadable with modprobe): bridged frames never meet "
                    "iptables, as Docker makes them")
    restore_killed_runs()
    saved = {"policy": forward_policy(),
             "bridge_nf_call_iptables": BRIDGE_NF_CALL_IPTABLES.read_text().strip()}
    record = Path(tempfile.gettempdir()) / f"{SAVED_PREFIX}{netns.new_tag()}.json"
    record.write_text(json.dumps(saved))
    try:
        BRIDGE_NF_CALL_IPTABLES.write_text("1")
        iptables("-P", "FORWARD", "DROP")
        yield
    finally:
        restore(saved)
        record.unlink()
        if loaded:
            subprocess.run(["modprobe", "-r", "br_netfilter"], capture_output=True, timeout=30)
    assert forward_policy() == saved["policy"], "expected the FORWARD policy restored"
    assert BRIDGE_NF_CALL_IPTABLES.read_text().strip() == saved["bridge_nf_call_iptables"]


def test_hosts_reach_each_other_through_dockers_drop_policy_and_the_rule_goes_with_the_network(
    docker_like_firewall: None,
) -> None:
    network = Network.create(["a", "b"])
    hosts = [Host(name, link.address, network.namespace_path(name)) for name, link in network.hosts.items()]
    a, b = hosts
    server = b.run(lambda: listen(b.address))
    try:
        assert network.bridge in netns.accept_rules(), iptables("-S", "FORWARD")
        assert a.run(lambda: probe(b.address)) == "accepted", "expected a to reach b across the bridge"

        # Without the rule Docker's policy drops the frames: what the rule is there for.
        iptables("-D", *netns.accept_rule(network.bridge))
        assert a.run(lambda: probe(b.address)) == "timeout", "expected DROP to drop the SYN without the rule"
        iptables("-I", *netns.accept_rule(network.bridge))
        wait_for(lambda: a.run(lambda: probe(b.address)) == "accepted", 5.0, "a reaching b, the rule back")
    finally:
        server.close()
        network.close()
        for host in hosts:
            host.close()
    assert network.bridge not in netns.accept_rules(), "expected the network's ACCEPT rule deleted by close()"
    assert network.leftovers() == []


def test_a_cluster_on_hosts_comes_up_through_dockers_drop_policy(
    docker_like_firewall: None, multihost: Callable[..., MultiHostCluster]
) -> None:
    # Each cell's rep reaches the BBS on `control` across the bridge: present cells are the proof.
    cluster = multihost(cells=2)
    assert cluster.network is not None
    bridge = cluster.network.bridge
    assert bridge in netns.accept_rules(), iptables("-S", "FORWARD")
    with cluster.http_client(base_url=cluster.bbs_url, timeout=5.0) as http:
        wait_for(lambda: {c["cell_id"] for c in http.get("/v1/cells").raise_for_status().json()["items"]}
                 == {"cell-0", "cell-1"}, 30.0, "both cells present")
    cluster.close()
    assert bridge not in netns.accept_rules(), "expected the network's ACCEPT rule deleted by close()"


def test_without_iptables_where_bridged_frames_are_filtered_the_reason_comes_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    switch = tmp_path / "bridge-nf-call-iptables"
    monkeypatch.setattr(netns, "BRIDGE_NF_CALL_IPTABLES", switch)
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    assert netns.firewall_unavailable_reason() is None, "no br_netfilter: nothing to let through"
    switch.write_text("0\n")
    assert netns.firewall_unavailable_reason() is None, "br_netfilter off: nothing to let through"
    switch.write_text("1\n")
    reason = netns.firewall_unavailable_reason()
    assert reason is not None and "apt-get install iptables" in reason, reason
    with pytest.raises(netns.NetworkError, match="ACCEPT rule cannot be inserted"):
        Network("ff00", netns.TEST_RANGE, "vdbrnever")._build([])  # refused before any `ip` runs
