"""Container networking through the CNI plugins, invoked as the CNI specification says (docs/containers.md,
"Networking").

Each container gets a network namespace of its own (`ip netns add`, at /var/run/netns/<container id>) that
the plugins of the cell's network attach: `bridge` (a per-cell bridge, the gateway of `--container-subnet`,
masquerading egress unless denied), `host-local` IPAM (addresses leased under the rep's data dir, so a
restarted rep finds them) and `portmap` (host port -> container port DNAT, also for connections to the
host's own addresses and 127.0.0.1, so everything that reached instances on their host ports still does).
A plugin is its binary run with CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and CNI_PATH in its
environment and its network configuration on stdin; a list is ADDed in order, each given the previous
result, and DELeted in reverse. What DEL needs (the ports, the ADD result) is kept in the container's state
file (rep/container_executor.py), so a rep restarted after `kill -9` deletes exactly what it added.

Egress: one masquerade rule per cell for its subnet (the bridge plugin's own would add a chain and rules
per container); denied (`--container-egress deny`), no masquerade and one FORWARD rule per cell drops what
its containers send beyond their bridge, replies to connections from outside excepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import json
import os
import shlex
import socket
import struct
import subprocess
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.procutil import run_captured

CNI_VERSION = "1.0.0"
PLUGIN_DIR = Path("/usr/lib/cni")
PLUGINS = ("bridge", "host-local", "portmap", "loopback")
NETNS_DIR = Path("/var/run/netns")
IFNAME = "eth0"
PLUGIN_TIMEOUT_S = 60.0
# Plugins that change iptables (`iptables_turn`); the others only make links and addresses (`links_turn`).
IPTABLES_PLUGINS = frozenset({"portmap"})
IPTABLES_AT_ONCE = 4
LINKS_AT_ONCE = 8


class CNIError(Exception):
    """A plugin refused: the message says which command of which plugin, and its error."""


@dataclass(frozen=True, slots=True)
class Network:
    """A cell's container network."""

    name: str  # vendue-<rep-key>: names the plugins' iptables chains and comments
    bridge: str  # at most 15 characters (IFNAMSIZ)
    subnet: str
    ipam_dir: Path
    egress: bool = True
    plugin_dir: Path = PLUGIN_DIR

    def plugins(self) -> list[dict[str, Any]]:
        bridge = {
            "type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False,
            "hairpinMode": True,
            "ipam": {"type": "host-local", "ranges": [[{"subnet": self.subnet}]],
                     "dataDir": str(self.ipam_dir), "routes": [{"dst": "0.0.0.0/0"}]},
        }
        portmap = {"type": "portmap", "snat": True, "capabilities": {"portMappings": True}}
        return [bridge, portmap]


def bridge_of(rep_key: str) -> str:
    """The bridge of a rep's cells: named after its key (its data dir's hash), so reps sharing a host never
    share one; at most IFNAMSIZ - 1 characters."""
    return f"vd{rep_key[:10]}"


def missing_plugins(plugin_dir: Path = PLUGIN_DIR) -> list[str]:
    return [p for p in PLUGINS if not (plugin_dir / p).is_file()]


def netns_path(name: str) -> Path:
    return NETNS_DIR / name


async def _exec(argv: list[str], stdin: bytes | None = None, env: dict[str, str] | None = None,
                timeout_s: float = PLUGIN_TIMEOUT_S) -> tuple[int, bytes, bytes]:
    return await run_captured(argv, stdin=stdin, env=env, timeout_s=timeout_s)


async def make_netns(name: str) -> Path:
    code, _, err = await _exec(["ip", "netns", "add", name])
    if code != 0 and b"File exists" not in err:
        raise CNIError(f"ip netns add {name}: {err.decode(errors='replace').strip()}")
    return netns_path(name)


async def remove_netns(name: str) -> None:
    if netns_path(name).exists():
        await _exec(["ip", "netns", "delete", name])


CLONE_NEWUSER, CLONE_NEWNET, MS_BIND, MNT_DETACH = 0x10000000, 0x40000000, 4096, 2


SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _unshare_user_and_net() -> None:
    """A holder's preexec: new user and network namespaces (the child of a fork is single-threaded), and
    their loopback up, which is all the loopback plugin does: the creator of a user namespace holds every
    capability in it until it execs, so no plugin (a Go program run per start) is needed for it."""
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER | CLONE_NEWNET)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def _bind(source: str, target: Path) -> None:
    target.touch(mode=0o444)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), str(target).encode(), None, MS_BIND, None) != 0:
        err = ctypes.get_errno()
        target.unlink(missing_ok=True)
        raise OSError(err, f"bind {source} on {target}: {os.strerror(err)}")


def unbind_ns(target: Path) -> None:
    if target.exists():
        ctypes.CDLL(None, use_errno=True).umount2(str(target).encode(), MNT_DETACH)
        target.unlink(missing_ok=True)


async def make_namespaces(name: str, userns_dir: Path, uid: int, gid: int) -> tuple[Path, Path]:
    """A user namespace mapping root to `uid`/`gid` alone, and a network namespace it owns with its loopback
    up, kept by bind mounts at `userns_dir/<name>` and /var/run/netns/<name> (a holder process makes them,
    and goes)."""
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    userns_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    holder = await asyncio.create_subprocess_exec(
        "sleep", "60", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=_unshare_user_and_net)
    user, net = userns_dir / name, netns_path(name)
    try:
        Path(f"/proc/{holder.pid}/uid_map").write_text(f"0 {uid} 1\n")
        Path(f"/proc/{holder.pid}/gid_map").write_text(f"0 {gid} 1\n")
        _bind(f"/proc/{holder.pid}/ns/user", user)
        try:
            _bind(f"/proc/{holder.pid}/ns/net", net)
        except OSError:
            unbind_ns(user)
            raise
    except OSError as exc:
        raise CNIError(f"cannot make the container's namespaces: {exc}") from None
    finally:
        holder.kill()
        await holder.wait()
    return user, net


def _plugin_env(net: Network, command: str, container_id: str, netns: Path) -> dict[str, str]:
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": container_id, "CNI_NETNS": str(netns),
            "CNI_IFNAME": IFNAME, "CNI_PATH": str(net.plugin_dir),
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


def _conf(net: Network, plugin: dict[str, Any], ports: list[tuple[int, int]],
          prev: dict[str, Any] | None) -> bytes:
    conf: dict[str, Any] = {"cniVersion": CNI_VERSION, "name": net.name, **plugin}
    if plugin.get("capabilities", {}).get("portMappings"):
        conf["runtimeConfig"] = {"portMappings": [
            {"hostPort": host, "containerPort": container, "protocol": "tcp"} for host, container in ports]}
    if prev is not None:
        conf["prevResult"] = prev
    return json.dumps(conf).encode()


_limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = \
    weakref.WeakKeyDictionary()


def _limit(name: str, size: int) -> asyncio.Semaphore:
    per_loop = _limits.setdefault(asyncio.get_running_loop(), {})
    if name not in per_loop:
        per_loop[name] = asyncio.Semaphore(size)
    return per_loop[name]


def iptables_turn() -> asyncio.Semaphore:
    """What a plugin that changes iptables runs under (portmap's ADD: 19 `iptables` runs, four of them
    listing the whole nat table; every DEL): at most IPTABLES_AT_ONCE of this process at a time. A hundred
    starts at once took 15-45 s each where one after another take 0.1 s; 4 at once gave 1.7 times the
    starts per second of 2, 8 no more than 4 (`tests/bench/containers.py`, docs/benchmarks.md)."""
    return _limit("iptables", IPTABLES_AT_ONCE)


def links_turn() -> asyncio.Semaphore:
    """What a container's namespaces, loopback and bridge ADD run under: no iptables (`ipMasq` is off, the
    cell has one masquerade rule), only a veth, an address lease and routes, so more at once; bounded so
    that a hundred starts do not fork a hundred plugins at once."""
    return _limit("links", LINKS_AT_ONCE)


async def _call(net: Network, plugin: dict[str, Any], command: str, container_id: str, netns: Path,
                ports: list[tuple[int, int]], prev: dict[str, Any] | None) -> dict[str, Any] | None:
    binary = str(net.plugin_dir / plugin["type"])
    code, out, err = await _exec([binary], _conf(net, plugin, ports, prev),
                                 _plugin_env(net, command, container_id, netns))
    if code != 0:
        try:
            answer = json.loads(out)
            why = f"{answer.get('msg', '')} {answer.get('details', '')}".strip()
        except ValueError:
            why = (out + err).decode(errors="replace").strip()
        raise CNIError(f"CNI {command} {plugin['type']}: {why[-300:]}")
    return json.loads(out) if command == "ADD" and out.strip() else None


async def add(net: Network, container_id: str, netns: Path, ports: list[tuple[int, int]],
              took: dict[str, float] | None = None, *, loopback: bool = True) -> dict[str, Any]:
    """Attach `netns` to the network with `ports` (host, container) mapped, each half in its turn; the final
    CNI result. A failure part way undoes what was added. `took` gets each plugin's seconds."""
    async with links_turn():
        result = await add_links(net, container_id, netns, took, loopback=loopback)
    async with iptables_turn():
        return await add_ports(net, container_id, netns, ports, result, took)


async def add_links(net: Network, container_id: str, netns: Path, took: dict[str, float] | None = None, *,
                    loopback: bool = True) -> dict[str, Any] | None:
    """The first half of `add`, in a `links_turn`: the loopback plugin (unless `make_namespaces` brought the
    loopback up already) and the plugins that do not change iptables (the bridge, its address lease); their
    result, for `add_ports`."""
    if loopback:
        began = time.monotonic()
        code, out, err = await _exec([str(net.plugin_dir / "loopback")],
                                     _conf(net, {"type": "loopback"}, [], None),
                                     {**_plugin_env(net, "ADD", container_id, netns), "CNI_IFNAME": "lo"})
        if code != 0:
            raise CNIError(f"CNI ADD loopback: {(out + err).decode(errors='replace').strip()[-300:]}")
        if took is not None:
            took["cni_loopback_s"] = round(time.monotonic() - began, 3)
    plugins = [p for p in net.plugins() if p["type"] not in IPTABLES_PLUGINS]
    return await _add(net, container_id, netns, plugins, [], None, took)


async def add_ports(net: Network, container_id: str, netns: Path, ports: list[tuple[int, int]],
                    prev: dict[str, Any] | None, took: dict[str, float] | None = None) -> dict[str, Any]:
    """The second half of `add`, in an `iptables_turn`: the plugins that change iptables (portmap)."""
    plugins = [p for p in net.plugins() if p["type"] in IPTABLES_PLUGINS]
    result = await _add(net, container_id, netns, plugins, ports, prev, took)
    assert result is not None
    return result


async def _add(net: Network, container_id: str, netns: Path, plugins: list[dict[str, Any]],
               ports: list[tuple[int, int]], result: dict[str, Any] | None,
               took: dict[str, float] | None) -> dict[str, Any] | None:
    try:
        for plugin in plugins:
            began = time.monotonic()
            result = await _call(net, plugin, "ADD", container_id, netns, ports, result)
            if took is not None:
                took[f"cni_{plugin['type']}_s"] = round(time.monotonic() - began, 3)
    except BaseException:
        with contextlib.suppress(CNIError, OSError):  # every plugin's DEL: each tolerates what is not there
            await delete(net, container_id, netns, ports, result)
        raise
    return result


async def delete(net: Network, container_id: str, netns: Path, ports: list[tuple[int, int]],
                 result: dict[str, Any] | None) -> None:
    """DEL every plugin, last first; each is tried (the spec asks plugins to tolerate what is already gone),
    and the first failure is raised once all were."""
    failure: CNIError | None = None
    for plugin in reversed(net.plugins()):
        try:
            await _call(net, plugin, "DEL", container_id, netns, ports, result)
        except CNIError as exc:
            failure = failure or exc
    if failure is not None:
        raise failure


def address_of(result: dict[str, Any]) -> str:
    """The container's IPv4 address in an ADD result."""
    for ip in result.get("ips", []):
        address = str(ip.get("address", ""))
        if address and ":" not in address:
            return address.split("/")[0]
    raise CNIError(f"CNI ADD gave no IPv4 address: {json.dumps(result)[:300]}")


# --- egress --------------------------------------------------------------------------------------------


def _egress_rule(net: Network) -> list[str]:
    return ["FORWARD", "-i", net.bridge, "!", "-o", net.bridge, "-m", "conntrack", "!", "--ctstate",
            "ESTABLISHED,RELATED", "-m", "comment", "--comment", f"{net.name} egress denied", "-j", "DROP"]


def _masquerade_rule(net: Network) -> list[str]:
    return ["POSTROUTING", "-s", net.subnet, "!", "-d", net.subnet, "-m", "comment", "--comment",
            f"{net.name} masquerade", "-j", "MASQUERADE"]


def _ensure(rule: list[str], table: str = "filter") -> None:
    if subprocess.run(["iptables", "-t", table, "-C", *rule], capture_output=True).returncode != 0:
        done = subprocess.run(["iptables", "-t", table, "-I", *rule], capture_output=True, text=True)
        if done.returncode != 0:
            raise CNIError(f"iptables: {done.stderr.strip()}")


def _remove(rule: list[str], table: str = "filter") -> None:
    for _ in range(16):  # as many times as it is there
        if subprocess.run(["iptables", "-t", table, "-D", *rule], capture_output=True).returncode != 0:
            return


def set_egress(net: Network) -> None:
    """The cell's egress rules (idempotent): one masquerade rule for the whole subnet (instead of the bridge
    plugin's chain per container: three fewer iptables calls per start), or the FORWARD rule that denies."""
    if net.egress:
        _remove(_egress_rule(net))
        _ensure(_masquerade_rule(net), "nat")
    else:
        _remove(_masquerade_rule(net), "nat")
        _ensure(_egress_rule(net))


def clear_egress(net: Network) -> None:
    """Remove the cell's egress rules."""
    _remove(_egress_rule(net))
    _remove(_masquerade_rule(net), "nat")


def remove_rules_of(net: Network) -> None:
    """Remove every egress rule commented with the network's name, whatever subnet it names: what a
    sweep of a rep whose flags it does not know (rep/container_executor.py sweep_containers) needs."""
    for table in ("nat", "filter"):
        out = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("-A ") and f'"{net.name} ' in line:
                subprocess.run(["iptables", "-t", table, "-D", *shlex.split(line)[1:]], capture_output=True)


def remove_bridge(net: Network) -> None:
    subprocess.run(["ip", "link", "delete", net.bridge], capture_output=True)

