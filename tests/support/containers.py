"""For the container executor's tests (rep/container_executor.py): whether this machine can run containers,
bridge subnets of their own for a cluster's cells, and what a container left on the host."""

from __future__ import annotations

import http.server
import ipaddress
import os
import random
import subprocess
from collections.abc import Sequence
from pathlib import Path

from rep.cni import NETNS_DIR, bridge_of
from rep.container_executor import RUNC_ROOT, USERNS_ROOT, container_problem, detect_runtime
from rep.isolation import isolation_problem, rep_key
from rep.settings import RepSettings

# 198.19.0.0/16: the upper half of RFC 2544's test range; tests/cluster's hosts pick their /24s anywhere in
# 198.18.0.0/15 but skip what an interface here already holds.
CONTAINER_RANGE = ipaddress.ip_network("198.19.0.0/16")


def containers_problem() -> str | None:
    """Why this machine cannot run the container executor, or None."""
    return container_problem() or isolation_problem(RepSettings(executor="container", isolation="cgroups"))


def used_networks() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            found.append(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    return found


def free_subnets(count: int, avoid: Sequence[ipaddress.IPv4Network] = ()) -> list[str]:
    """`count` /24s of CONTAINER_RANGE no interface here overlaps, nor any of `avoid` (a network the cells'
    hosts are on, when each cell is a namespace of its own: tests/cluster/multihost.py)."""
    used = [*used_networks(), *avoid]
    candidates = [s for s in CONTAINER_RANGE.subnets(new_prefix=24) if not any(s.overlaps(u) for u in used)]
    random.SystemRandom().shuffle(candidates)
    return [str(s) for s in candidates[:count]]


def container_leftovers(data_dir: Path, netns: str | None = None, *, cell_level: bool = True) -> list[str]:
    """What the containers of a rep on `data_dir` left on the host: runc state, network namespaces, overlay
    mounts, iptables rules, veths on its bridge, its bridge. `netns`: the named network namespace the rep
    runs in (a host of the multi-host cluster), where its bridge and iptables rules are; `cell_level`
    False leaves out what the rep keeps while it runs, its bridge and egress rule (what is left of its
    containers alone)."""
    key = rep_key(data_dir)
    in_netns = ["ip", "netns", "exec", netns] if netns else []
    prefix = f"vd-{key[:8]}-"
    left: list[str] = []
    runtime = detect_runtime()
    root = RUNC_ROOT / key
    if runtime is not None and root.is_dir():
        out = subprocess.run([runtime.path, "--root", str(root), "list", "-q"], capture_output=True,
                             text=True).stdout
        left += [f"runc container {c}" for c in out.split()]
    if NETNS_DIR.is_dir():
        left += [f"netns {n.name}" for n in NETNS_DIR.iterdir() if n.name.startswith(prefix)]
    if (USERNS_ROOT / key).is_dir():
        left += [f"userns {n.name}" for n in (USERNS_ROOT / key).iterdir()]
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    left += [f"mount {m.split()[4]}" for m in mounts if key in m.split()[4] or prefix in m.split()[4]]
    rules = subprocess.run([*in_netns, "iptables-save"], capture_output=True, text=True).stdout.splitlines()
    left += [f"iptables {rule}" for rule in rules if prefix in rule]
    if cell_level:
        left += [f"iptables {rule}" for rule in rules if f"vendue-{key}" in rule and prefix not in rule]
    if netns:  # the rep's namespace is its own: any chain portmap made there is its
        left += [f"iptables chain {rule.split()[0][1:]}" for rule in rules if rule.startswith(":CNI-DN-")]
    bridge = bridge_of(key)
    where = ["-n", netns] if netns else []
    links = subprocess.run(["ip", *where, "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {line: line.split(":")[1].strip().split("@")[0] for line in links.splitlines() if ":" in line}
    left += [f"veth {name}" for line, name in names.items() if f" master {bridge} " in line]
    if cell_level and bridge in names.values():
        left.append(f"bridge {bridge}")
    return left


def bridge_ports(data_dir: Path) -> list[str]:
    """The interfaces on the bridge of the rep on `data_dir`: its containers' veths (none without it)."""
    out = subprocess.run(["ip", "-o", "link", "show", "master", bridge_of(rep_key(data_dir))],
                         capture_output=True, text=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def root() -> bool:
    return os.geteuid() == 0


HOST_SECRET = "host secret\n"


class HostSecretHandler(http.server.BaseHTTPRequestHandler):
    """What a service only the host should reach answers (HOST_SECRET): a container that reads it is not
    isolated from the host's loopback."""

    def do_GET(self) -> None:  # noqa: N802  (http.server's name)
        body = HOST_SECRET.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass
