"""Hosts as Linux network namespaces on one bridge: the network of the multi-host test cluster.

    network = Network.create(["control", "cell-0", "cell-1"])   # needs root and `ip` (iproute2)
    network.address("cell-0")                # 198.18.N.3: every host its own address in one /24
    network.partition("cell-0")              # its link down: cut off from everything
    network.heal("cell-0")                   # and up again
    network.cut("cell-0", "control")         # only these two cannot reach each other
    network.mend("cell-0", "control")
    network.close()                          # every process in the namespaces killed, everything removed

Layout: one bridge in the root namespace holding 198.18.N.1/24 and, per host, a namespace (loopback up)
with a veth pair: one end on the bridge, the other, `eth0`, in the namespace with 198.18.N.k/24. The /24 is
picked at random in 198.18.0.0/15 (RFC 2544's range for network tests: never a real network) among those
no interface uses yet, so parallel test workers each get their own. There is no default route: a host
reaches the other hosts and the root namespace's bridge address (where the tests talk from), nothing else.

A partition is what a real one looks like to TCP, packets that vanish (connections hang, then time out),
never a quick refusal:
- `partition(host)` takes the host's link down (`ip link set <veth> down`; tc netem is not available here);
- `cut(a, b)` gives each of the two a permanent neighbour entry for the other's address with a MAC address
  nobody has, so whatever one sends the other goes nowhere while both still reach everyone else.

Where bridged frames go through iptables (br_netfilter with net.bridge.bridge-nf-call-iptables=1, as on a
host that runs Docker, which also sets FORWARD's policy to DROP), traffic between the hosts would be
dropped: the network inserts its own `iptables -I FORWARD -i <bridge> -o <bridge> -j ACCEPT` and deletes it
in `close()`. `firewall_unavailable_reason()` says why that cannot be done here (no usable `iptables`).

Names: namespaces `vendue-<tag>-<host>`, the bridge `vdbr<tag>`, the root ends of the veths `vd<tag>h<k>`,
where the tag is this process's pid in hex and two random hex digits (an interface name has at most 15
characters). `sweep()` removes what a network whose process is gone left behind (a run killed before its
teardown); `close()` removes everything of this one, also when called after a failed `create`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import re
import secrets
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common.procutil import pid_alive

TEST_RANGE = ipaddress.ip_network("198.18.0.0/15")
PREFIX = "vendue-"  # of every namespace of ours
BRIDGE_PREFIX = "vdbr"
VETH_PREFIX = "vd"
# What a dead run may have left, the tag captured ("r" is no hex digit: a bridge is never taken for a veth).
OUR_NAMESPACE = re.compile(r"^vendue-([0-9a-f]+)-")
OUR_BRIDGE = re.compile(r"^vdbr([0-9a-f]+)$")
OUR_VETH = re.compile(r"^vd([0-9a-f]+)h\d+$")
MAX_HOSTS = 200  # .2 .. .201 of the /24
NOWHERE_MAC = "02:00:00:00:00:00"  # locally administered, owned by no interface: frames to it are dropped
NETNS_DIR = Path("/run/netns")  # where `ip netns add` mounts each namespace
IP_TIMEOUT_S = 30.0
GONE_TIMEOUT_S = 10.0  # for the processes of a namespace to die after SIGKILL
TCP_ESTABLISHED = "01"  # the state column of /proc/net/tcp
# br_netfilter's switch: 1 sends every bridged IPv4 frame through iptables (FORWARD among others). Absent
# when br_netfilter is not loaded: then bridged frames never meet iptables.
BRIDGE_NF_CALL_IPTABLES = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
IPTABLES_LOCK_WAIT_S = "10"  # for the xtables lock another program (dockerd) may hold


class NetworkError(RuntimeError):
    """An `ip` command failed (its own words), or the network is not in the state an operation needs."""


def ip(*args: str, check: bool = True) -> str:
    """Run `ip ARGS`; its stdout. A failure raises NetworkError with ip's stderr."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if check and done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return done.stdout


def iptables(*args: str, check: bool = True) -> str:
    """Run `iptables ARGS` (waiting for the xtables lock); its stdout. A failure raises NetworkError."""
    done = subprocess.run(["iptables", "-w", IPTABLES_LOCK_WAIT_S, *args], capture_output=True, text=True,
                          timeout=IP_TIMEOUT_S)
    if check and done.returncode != 0:
        raise NetworkError(
            f"iptables {' '.join(args)}: {done.stderr.strip() or f'exit status {done.returncode}'}"
        )
    return done.stdout


def bridged_frames_filtered() -> bool:
    """Whether frames crossing a bridge here go through iptables' FORWARD chain (br_netfilter on)."""
    try:
        return BRIDGE_NF_CALL_IPTABLES.read_text().strip() == "1"
    except OSError:
        return False


def accept_rule_usable() -> bool:
    """Whether a network here can let its bridge's traffic pass with a rule of its own: br_netfilter is
    loaded (it may be switched on later, as Docker does when it starts) and `iptables` answers."""
    if not BRIDGE_NF_CALL_IPTABLES.exists() or shutil.which("iptables") is None:
        return False
    try:
        iptables("-S", "FORWARD")
    except (NetworkError, OSError, subprocess.TimeoutExpired):
        return False
    return True


def firewall_unavailable_reason() -> str | None:
    """Why the hosts could not reach each other over the bridge here (None: they can): bridged frames go
    through iptables, where a FORWARD policy of DROP (Docker's) would drop them, and there is no working
    `iptables` to insert the network's own ACCEPT rule with."""
    if not bridged_frames_filtered() or accept_rule_usable():
        return None
    how = ("there is no `iptables` (apt-get install iptables)" if shutil.which("iptables") is None
           else "`iptables -S FORWARD` fails")
    return (f"bridged traffic goes through iptables here ({BRIDGE_NF_CALL_IPTABLES} is 1, as on a host "
            f"that runs Docker, whose FORWARD policy DROP would cut the hosts apart), and {how}: the test "
            "bridge's ACCEPT rule cannot be inserted")


def accept_rule(bridge: str) -> tuple[str, ...]:
    """The FORWARD rule that lets frames from one port of `bridge` to another pass (`-I` or `-D` before)."""
    return ("FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT")


def accept_rules() -> list[str]:
    """The bridges of ours that have an ACCEPT rule in iptables' FORWARD chain (none without iptables)."""
    if not accept_rule_usable():
        return []
    rule = re.compile(r"^-A FORWARD -i (\S+) -o \1 -j ACCEPT$")
    return [m[1] for line in iptables("-S", "FORWARD").splitlines()
            if (m := rule.match(line.strip())) and OUR_BRIDGE.match(m[1])]


def netns_pids(namespace: str) -> list[int]:
    """Every process in the namespace (`ip netns pids`; none when it is gone)."""
    return [int(pid) for pid in ip("netns", "pids", namespace, check=False).split()]


def established_peers(pid: int) -> set[tuple[str, int]]:
    """The (IPv4 address, port) of the other end of every established TCP connection of process `pid`,
    from the kernel's tables (its sockets in /proc/PID/fd, its namespace's /proc/PID/net/tcp): where it
    is connected, whatever it says. Empty once it is gone."""
    try:
        inodes = {link[len("socket:["):-1] for fd in os.listdir(f"/proc/{pid}/fd")
                  if (link := _readlink(f"/proc/{pid}/fd/{fd}")).startswith("socket:[")}
        rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except (FileNotFoundError, ProcessLookupError):
        return set()
    peers = set()
    for row in rows:
        fields = row.split()  # sl local rem st tx:rx tr:when retrnsmt uid timeout inode
        if fields[3] == TCP_ESTABLISHED and fields[9] in inodes:
            address, port = fields[2].split(":")
            # The kernel prints the address's four bytes as one native-endian number.
            peers.add((socket.inet_ntoa(struct.pack("=I", int(address, 16))), int(port, 16)))
    return peers


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:  # closed meanwhile
        return ""


def new_tag() -> str:
    """What this process's names carry: its pid in hex and two random hex digits."""
    return f"{os.getpid():x}{secrets.token_hex(1)}"


def dead_tag(tag: str) -> bool:
    """Whether the process that made names with `tag` is gone (False for what is not one of our tags)."""
    try:
        pid = int(tag[:-2], 16) if len(tag) > 2 else None
    except ValueError:
        return False
    return pid is not None and not pid_alive(pid)


def used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of every interface in the root namespace."""
    found = []
    for line in ip("-o", "-4", "addr", "show").splitlines():
        fields = line.split()
        if "inet" in fields:
            found.append(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    return found


def free_subnet(rng: random.Random | None = None) -> ipaddress.IPv4Network:
    """A /24 of 198.18.0.0/15 that no interface here overlaps."""
    used = used_networks()
    candidates = list(TEST_RANGE.subnets(new_prefix=24))
    (rng or random.SystemRandom()).shuffle(candidates)
    for subnet in candidates:
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise NetworkError(f"every /24 of {TEST_RANGE} is in use")


def kill_namespace_processes(namespace: str) -> list[int]:
    """SIGKILL every process in the namespace and wait until they are gone; the pids it killed."""
    killed: list[int] = []
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while pids := [pid for pid in netns_pids(namespace) if pid_alive(pid)]:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        killed += [pid for pid in pids if pid not in killed]
        if time.monotonic() > deadline:
            raise NetworkError(f"processes {pids} of namespace {namespace} outlived SIGKILL")
        time.sleep(0.02)  # polling interval of a deadline-bounded wait
    return killed


def sweep() -> list[str]:
    """Remove the namespaces, bridges and veths of networks whose process is gone (killed before its
    teardown); what it removed. A live process's network is left alone."""
    removed: list[str] = []
    for line in ip("netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        if (match := OUR_NAMESPACE.match(name)) and dead_tag(match[1]):
            kill_namespace_processes(name)
            ip("netns", "del", name, check=False)
            removed.append(name)
    for line in ip("-o", "link", "show").splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if (match := OUR_BRIDGE.match(name) or OUR_VETH.match(name)) and dead_tag(match[1]):
            ip("link", "del", name, check=False)
            removed.append(name)
    for bridge in accept_rules():
        if (match := OUR_BRIDGE.match(bridge)) and dead_tag(match[1]):
            iptables("-D", *accept_rule(bridge), check=False)
            removed.append(f"iptables {' '.join(accept_rule(bridge))}")
    return removed


@dataclass
class HostLink:
    name: str
    namespace: str
    veth: str  # its link's end on the bridge, in the root namespace
    address: str


@dataclass
class Network:
    tag: str
    subnet: ipaddress.IPv4Network
    bridge: str
    hosts: dict[str, HostLink] = field(default_factory=dict)
    _cuts: set[frozenset[str]] = field(default_factory=set)
    has_accept_rule: bool = False  # set before the rule is inserted: close() then tries to delete it

    @classmethod
    def create(cls, hosts: Sequence[str]) -> Network:
        """Sweep what dead runs left, then build the bridge and a namespace per host (see the module doc).
        Everything made so far is removed when a step fails."""
        if len(set(hosts)) != len(hosts) or not 0 < len(hosts) <= MAX_HOSTS:
            raise ValueError(f"hosts: 1..{MAX_HOSTS} distinct names, got {list(hosts)}")
        sweep()
        tag = new_tag()
        network = cls(tag, free_subnet(), f"{BRIDGE_PREFIX}{tag}")
        try:
            network._build(hosts)
        except BaseException:
            network.close()
            raise
        return network

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge: where the tests' own traffic comes from."""
        return str(self.subnet.network_address + 1)

    def _build(self, hosts: Sequence[str]) -> None:
        # The rule whenever br_netfilter is loaded, not only while it is on: Docker may switch it on (with
        # its DROP policy) while this network lives, and a test that plays Docker does (docker_firewall_test).
        let_through = accept_rule_usable()
        if not let_through and (reason := firewall_unavailable_reason()) is not None:
            raise NetworkError(reason)
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        if let_through:
            self.has_accept_rule = True
            iptables("-I", *accept_rule(self.bridge))
        for k, name in enumerate(hosts):
            link = HostLink(name, f"{PREFIX}{self.tag}-{name}", f"{VETH_PREFIX}{self.tag}h{k}",
                            str(self.subnet.network_address + 2 + k))
            self.hosts[name] = link
            ip("netns", "add", link.namespace)
            ip("-n", link.namespace, "link", "set", "lo", "up")
            ip("link", "add", link.veth, "type", "veth", "peer", "name", "eth0", "netns", link.namespace)
            ip("link", "set", link.veth, "master", self.bridge)
            ip("link", "set", link.veth, "up")
            ip("-n", link.namespace, "addr", "add", f"{link.address}/{self.subnet.prefixlen}", "dev", "eth0")
            ip("-n", link.namespace, "link", "set", "eth0", "up")

    # --- looking up ---------------------------------------------------------------------------------

    def link(self, host: str) -> HostLink:
        if host not in self.hosts:
            raise KeyError(f"no host {host!r} (hosts: {', '.join(self.hosts)})")
        return self.hosts[host]

    def address(self, host: str) -> str:
        return self.link(host).address

    def namespace_path(self, host: str) -> Path:
        return NETNS_DIR / self.link(host).namespace

    def pids(self, host: str) -> list[int]:
        """Every live process in the host's namespace."""
        return [pid for pid in netns_pids(self.link(host).namespace) if pid_alive(pid)]

    def is_partitioned(self, host: str) -> bool:
        """Whether the host's link is down."""
        shown = ip("-o", "link", "show", "dev", self.link(host).veth)
        return "UP" not in shown.split("<", 1)[1].split(">", 1)[0].split(",")

    # --- faults -------------------------------------------------------------------------------------

    def partition(self, host: str) -> None:
        """Cut the host off from everything: its link goes down."""
        ip("link", "set", self.link(host).veth, "down")

    def heal(self, host: str) -> None:
        ip("link", "set", self.link(host).veth, "up")

    def cut(self, a: str, b: str) -> None:
        """Packets between hosts `a` and `b` go nowhere, both ways; each still reaches everyone else."""
        one, other = self.link(a), self.link(b)
        for source, target in ((one, other), (other, one)):
            ip("-n", source.namespace, "neigh", "replace", target.address, "lladdr", NOWHERE_MAC,
               "dev", "eth0", "nud", "permanent")
        self._cuts.add(frozenset((a, b)))

    def mend(self, a: str, b: str) -> None:
        """Undo `cut(a, b)`: the two resolve each other's address again (ARP)."""
        one, other = self.link(a), self.link(b)
        for source, target in ((one, other), (other, one)):
            ip("-n", source.namespace, "neigh", "del", target.address, "dev", "eth0", check=False)
        self._cuts.discard(frozenset((a, b)))

    def heal_all(self) -> None:
        """Every link up, every cut mended."""
        for host in self.hosts:
            self.heal(host)
        for pair in list(self._cuts):
            self.mend(*sorted(pair))

    # --- teardown -----------------------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        """This network's namespaces, bridge and ACCEPT rule that still exist (none after `close`)."""
        names = sorted(p.name for p in NETNS_DIR.glob(f"{PREFIX}{self.tag}-*")) if NETNS_DIR.is_dir() else []
        bridge = Path("/sys/class/net") / self.bridge
        rule = [f"iptables {' '.join(accept_rule(self.bridge))}"] if self.bridge in accept_rules() else []
        return [*names, *([self.bridge] if bridge.exists() else []), *rule]

    def close(self) -> list[int]:
        """Kill every process in every namespace, then remove the namespaces, veths and the bridge. Safe to
        call twice, and on a half-built network. Returns the pids it had to kill."""
        killed: list[int] = []
        for link in self.hosts.values():
            if (NETNS_DIR / link.namespace).exists():
                killed += kill_namespace_processes(link.namespace)
                ip("netns", "del", link.namespace, check=False)
            ip("link", "del", link.veth, check=False)  # gone with its namespace, unless that failed
        ip("link", "del", self.bridge, check=False)
        if self.has_accept_rule:
            iptables("-D", *accept_rule(self.bridge), check=False)
            self.has_accept_rule = False
        self.hosts.clear()
        return killed
