"""The hosts' network: two namespaces on a bridge reach each other and the root namespace; a partition
(link down) and a cut (between two hosts only) make packets vanish until healed; close() and sweep() (and
sweep_data_dirs) leave nothing behind, processes and files included. Needs root and `ip` (skipped
otherwise, saying why)."""

from __future__ import annotations

import ipaddress
import os
import random
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.procutil import child_preexec, pid_alive
from tests.e2e.conftest import wait_for
from tests.support.reach import listen, probe, reaches

from . import netns
from .hosts import Host
from .multihost import sweep_data_dirs, unavailable_reason
from .netns import Network

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture
def two_hosts() -> Iterator[tuple[Network, Host, Host]]:
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    network = Network.create(["a", "b"])
    hosts = [Host(name, link.address, network.namespace_path(name)) for name, link in network.hosts.items()]
    try:
        yield network, hosts[0], hosts[1]
    finally:
        network.close()
        for host in hosts:
            host.close()


def test_names_and_addresses_stay_within_bounds() -> None:
    tag = netns.new_tag()
    assert len(f"{netns.VETH_PREFIX}{tag}h{netns.MAX_HOSTS}") <= 15
    assert len(f"{netns.BRIDGE_PREFIX}{tag}") <= 15
    assert netns.OUR_BRIDGE.match(f"{netns.BRIDGE_PREFIX}{tag}") and not netns.OUR_VETH.match(f"vdbr{tag}")


def test_the_subnet_is_one_no_interface_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    every = list(netns.TEST_RANGE.subnets(new_prefix=24))
    left = every[137]
    monkeypatch.setattr(netns, "used_networks", lambda: [n for n in every if n != left])
    assert netns.free_subnet(random.Random(1)) == left
    monkeypatch.setattr(netns, "used_networks", lambda: [netns.TEST_RANGE])
    with pytest.raises(netns.NetworkError, match="in use"):
        netns.free_subnet()


def test_hosts_reach_each_other_until_partitioned_or_cut(two_hosts: tuple[Network, Host, Host]) -> None:
    network, a, b = two_hosts
    assert ipaddress.ip_address(a.address) in netns.TEST_RANGE and network.subnet.subnet_of(netns.TEST_RANGE)
    servers = [a.run(lambda: listen(a.address)), b.run(lambda: listen(b.address))]
    try:
        assert b.run(lambda: not reaches("127.0.0.1")), "expected b's loopback to be b's own (nothing there)"
        assert reaches(b.address) and a.run(lambda: reaches(b.address)), "expected b reachable from all"

        network.partition("b")
        assert network.is_partitioned("b")
        assert not reaches(b.address) and not a.run(lambda: reaches(b.address)), "expected b cut off from all"
        assert not b.run(lambda: reaches(a.address)), "expected a unreachable from the partitioned b"
        network.heal("b")
        assert not network.is_partitioned("b")
        wait_for(lambda: a.run(lambda: reaches(b.address)), 5.0, "b reachable from a once healed")

        network.cut("a", "b")
        cut = (a.run(lambda: probe(b.address)), b.run(lambda: probe(a.address)))
        assert cut == ("timeout", "timeout"), f"expected packets vanishing (timeouts, not refusals): {cut}"
        assert reaches(a.address) and reaches(b.address), "expected the root namespace to reach both still"
        network.mend("a", "b")
        wait_for(lambda: a.run(lambda: reaches(b.address)) and b.run(lambda: reaches(a.address)), 5.0,
                 "a and b reaching each other once mended")
    finally:
        for server in servers:
            server.close()


def test_close_kills_every_process_and_removes_everything(two_hosts: tuple[Network, Host, Host]) -> None:
    network, a, _ = two_hosts
    proc = a.run(lambda: subprocess.Popen(["sleep", "60"], preexec_fn=child_preexec()))
    assert network.pids("a") == [proc.pid]
    names = [link.namespace for link in network.hosts.values()]
    veths = [link.veth for link in network.hosts.values()]

    assert network.close() == [proc.pid]
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert not set(names) & set(netns.ip("netns", "list").split()), "expected the namespaces gone"
    links = netns.ip("-o", "link", "show")
    assert not [name for name in [*veths, network.bridge] if f" {name}:" in links or f" {name}@" in links]


def test_sweep_removes_what_a_killed_run_left_and_spares_live_ones(
    two_hosts: tuple[Network, Host, Host],
) -> None:
    live, _, _ = two_hosts
    # A run that builds a network, starts a process in it, and is killed before its teardown.
    script = textwrap.dedent("""
        import subprocess, sys, tempfile
        from tests.cluster.hosts import Host
        from tests.cluster.multihost import DATA_PREFIX
        from tests.cluster.netns import Network
        network = Network.create(["x"])
        host = Host("x", network.hosts["x"].address, network.namespace_path("x"))
        proc = host.run(lambda: subprocess.Popen(["sleep", "60"], start_new_session=True))
        files = tempfile.mkdtemp(prefix=f"{DATA_PREFIX}{network.tag}-")
        print(network.hosts["x"].namespace, network.bridge, proc.pid, files, flush=True)
        sys.stdin.read()
    """)
    run = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True, cwd=os.getcwd(), preexec_fn=child_preexec())
    namespace, bridge, sleeper, files = run.stdout.readline().split()  # type: ignore[union-attr]
    run.kill()
    run.wait(timeout=10)
    assert pid_alive(int(sleeper)), "expected the dead run's process still there (its own session, no parent)"

    removed = netns.sweep()
    assert namespace in removed and bridge in removed, removed
    wait_for(lambda: not pid_alive(int(sleeper)), 5.0, f"the dead run's process {sleeper} killed")
    assert not [name for name in removed if live.tag in name], "expected the live network spared"
    assert all(link.namespace in netns.ip("netns", "list") for link in live.hosts.values())
    assert Path(files) in sweep_data_dirs() and not Path(files).exists(), f"expected {files} removed"


def test_established_peers_are_read_from_the_kernels_tables() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as client:
            accepted, _ = server.accept()
            with accepted:
                peers = netns.established_peers(os.getpid())
                assert ("127.0.0.1", port) in peers, peers  # the client's end
                assert ("127.0.0.1", client.getsockname()[1]) in peers, peers  # the accepted end
    assert ("127.0.0.1", port) not in netns.established_peers(os.getpid())
    assert netns.established_peers(2**22 + 1) == set()  # no such process
