"""The container executor (`--executor container`): an instance with an image runs in a container, as
Garden-runC runs Diego's, started by runc (or crun) from a generated OCI runtime spec (rep/oci_spec.py).

It is the process executor (rep/process_executor.py) with another way to start and end the instance's
program: the same instance user, cgroup (limits, CPU weight, OOM reason, leftovers killed at start), disk
quota, logs, usage, health checks and reasons. Work without an image runs exactly as the process executor
runs it (docs/containers.md says why). For an instance with an image:

- the image (the digest the BBS pinned) is pulled and unpacked once per host into the artifact cache
  (rep/image_store.py); a pull that fails crashes the instance with the reason, as an artifact's would;
- its root filesystem is an overlay mounted by the rep at `<dir>/rootfs`: the cached tree, read-only, under
  `<dir>/upper`, both in the instance's directory, which is the filesystem of disk_mb (rep/disk_quota.py):
  what the container writes is bounded by its disk quota (or measured against it, as a process's files);
- a network namespace of its own, attached by the CNI plugins to the cell's bridge with its ports mapped
  (rep/cni.py): inside, $PORT is the container port (the LRP's first, 8080 when it names none, as Diego),
  outside the actual LRP reports the host port mapped to it, and the health check connects to that;
- runc runs in the instance's cgroup and puts the container in a cgroup below it (rep/oci_spec.py): stop
  sends SIGTERM to every process of the container, SIGKILL after the grace; an OOM reads as the process
  executor's; runc's exit status 128+N reads as "killed by signal N";
- the container's pid 1 is the host's static tini (`--container-init`, bound read-only), the app its child:
  it forwards signals to the app, reaps orphans and exits with the app's status (128+N when a signal N
  killed it, as runc reports an init killed by one), so reasons read as they would without it;
- what outlives a killed rep (runc's state under the rep's own `--root`, the overlay, the network namespace,
  its veth, address lease and portmap rules) is in a state file per container under the data dir: the next
  start's `open` removes all of it before the process executor's sweep of cgroups and directories.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from common.models import HealthCheck, PortMapping
from common.models.artifact import Artifact
from common.models.image import Image
from common.procutil import child_preexec, free_port, run_captured

from . import cni
from .artifact_cache import ArtifactError, describe, placed_paths
from .cgroups import InstanceCgroup, parse_mountinfo, parse_proc_cgroup
from .container_exec import ContainerExecSession, exec_process
from .executor import ExecRefused, ExecSession, ExecutorListener, LRPContainer, TaskContainer
from .image_store import ImageStore
from .isolation import IsolationError, rep_key
from .log_stream import Origin
from .oci_spec import INIT_PATH, BindMount, ContainerSpec, runtime_spec
from .output_log import OutputLog
from .process_executor import DEFAULT_PATH, ProcessExecutor, _Child, exit_reason

log = logging.getLogger("rep.container")

DEFAULT_CONTAINER_PORT = 8080  # Diego's, for an LRP that names no port
RUNTIMES = ("runc", "crun")
RUNC_ROOT = Path("/run/vendue-runc")
USERNS_ROOT = Path("/run/vendue-userns")
STATE_DIR = "bundles"  # <data-dir>/<cell>/bundles/<guid>/: config.json, state.json, hosts
UPPER, WORK, ROOTFS = "upper", "work", "rootfs"
RUNTIME_TIMEOUT_S = 30.0
MS_DETACH = 2
DEFAULT_INIT = Path("/usr/bin/tini-static")  # Debian's tini
PT_INTERP = 3


@dataclass(frozen=True, slots=True)
class Runtime:
    path: str
    name: str  # runc or crun
    version: str  # 1.1.5

    @property
    def title(self) -> str:
        return f"{self.name} {self.version}"


def detect_runtime() -> Runtime | None:
    """runc, else crun, on PATH (or /usr/sbin, /usr/bin): its version from `--version`."""
    for name in RUNTIMES:
        path = shutil.which(name) or next(
            (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.is_file()), None)
        if path is None:
            continue
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        match = re.search(r"version\s+(\d+(?:\.\d+)*)", out)
        return Runtime(path, name, match.group(1) if match else "unknown")
    return None


def userns_allowed() -> bool:
    """Whether this kernel lets the rep make user namespaces (max_user_namespaces > 0)."""
    try:
        return int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    except (OSError, ValueError):
        return False


def overlay_supported() -> bool:
    try:
        lines = Path("/proc/filesystems").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[-1] == "overlay" for line in lines if line.strip())


def init_problem(init: Path) -> str | None:
    """Why `init` cannot be a container's pid 1 (it must run in any image, one with no libc among them: a
    static executable), as what is missing, or None."""
    try:
        with init.open("rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or not os.access(init, os.X_OK):
                return f"a static container init: {init} is not an executable ELF binary"
            wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
            phoff, phentsize, phnum = (struct.unpack_from(f"{order}Q", head, 32)[0],
                                       *struct.unpack_from(f"{order}HH", head, 54)) if wide else (
                struct.unpack_from(f"{order}I", head, 28)[0], *struct.unpack_from(f"{order}HH", head, 42))
            f.seek(phoff)
            table = f.read(phentsize * phnum)
    except FileNotFoundError:
        return f"the container init {init} (Debian: apt install tini)"
    except (OSError, struct.error) as exc:
        return f"the container init {init}: {exc}"
    kinds = [struct.unpack_from(f"{order}I", table, i * phentsize)[0] for i in range(len(table) // phentsize)]
    if PT_INTERP in kinds:
        return f"a static container init: {init} is dynamically linked (Debian's tini: /usr/bin/tini-static)"
    return None


def container_problem(plugin_dir: Path = cni.PLUGIN_DIR, init: Path = DEFAULT_INIT) -> str | None:
    """Why this host cannot run containers (one line naming what is missing), or None."""
    missing: list[str] = []
    if os.geteuid() != 0:
        missing.append(f"root (running as uid {os.geteuid()})")
    if detect_runtime() is None:
        missing.append("an OCI runtime (runc or crun)")
    if not overlay_supported():
        missing.append("overlayfs (not in /proc/filesystems)")
    absent = cni.missing_plugins(plugin_dir)
    if absent:
        missing.append(f"the CNI plugins {', '.join(absent)} in {plugin_dir}")
    for tool in ("skopeo", "umoci", "ip", "iptables"):
        if shutil.which(tool) is None:
            missing.append(tool)
    if (why := init_problem(init)) is not None:
        missing.append(why)
    if not missing:
        return None
    return f"--executor container: missing {'; '.join(missing)}"


@dataclass(slots=True)
class _Container:
    """What an instance with an image has beyond a process's."""

    image: Image
    container_id: str
    lower: Path | None = None  # the image's tree in the cache
    netns: Path | None = None
    userns: Path | None = None  # with a user namespace: the one that owns `netns`
    cni_result: dict[str, Any] | None = None
    address: str | None = None  # its own, on the cell's bridge
    mapping: asyncio.Future[None] | None = None  # its ports being mapped (portmap), beside runc's start
    ports: list[tuple[int, int]] = field(default_factory=list)  # (host, container)
    inner: InstanceCgroup | None = None  # runc's cgroup, below the instance's
    mounted: bool = False
    artifacts: list[Artifact] = field(default_factory=list)  # placed in the instance's directory
    took: dict[str, float] = field(default_factory=dict)  # seconds of each phase of its start
    spawned: float = 0.0  # when runc was started (monotonic)
    created: float = field(default_factory=time.monotonic)


def _libc_mount(source: str, target: str, fstype: str, flags: int, data: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), fstype.encode(), flags, data.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target}: {os.strerror(err)}")


def _unmount(target: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(str(target).encode(), 0) != 0:
        err = ctypes.get_errno()
        if err in (22, 2):  # EINVAL: not a mount point; ENOENT: gone
            return
        if libc.umount2(str(target).encode(), MS_DETACH) != 0:
            raise OSError(ctypes.get_errno(), f"umount {target}")


def _prepare_rootfs(lower: Path, directory: Path, cwd: str, uid: int, gid: int) -> Path:
    """Mount the overlay (the image read-only below, the instance's upper layer above) and make, as root,
    what the spec mounts or the app needs that the image may lack: mount points, /tmp, its working dir."""
    upper, work, rootfs = directory / UPPER, directory / WORK, directory / ROOTFS
    for d in (upper, work, rootfs):
        d.mkdir(mode=0o755)
    _libc_mount("overlay", str(rootfs), "overlay", 0,
                f"lowerdir={lower},upperdir={upper},workdir={work}")
    for point in ("proc", "dev", "etc"):
        (rootfs / point).mkdir(mode=0o755, exist_ok=True)
    tmp = rootfs / "tmp"  # writable by anyone, as apps expect (a chmod through the overlay copies it up)
    if not tmp.is_dir():
        tmp.mkdir()
    tmp.chmod(0o1777)
    for name in ("hosts", "resolv.conf", "hostname"):
        target = rootfs / "etc" / name
        if not target.exists() and not target.is_symlink():
            target.touch(mode=0o644)
    if cwd.strip("/"):  # the app's working dir is its own (a chown through the overlay copies it up)
        work_dir = rootfs / cwd.lstrip("/")
        work_dir.mkdir(parents=True, exist_ok=True)
        os.chown(work_dir, uid, gid, follow_symlinks=False)
    return rootfs


def overlay_clash(artifacts: list[Artifact], cached_of: Callable[[str], Path]) -> str | None:
    """Why an artifact cannot be placed beside a container's overlay (its `rootfs`, `upper` or `work` in the
    instance's directory), or None."""
    for artifact in artifacts:
        for rel in placed_paths(artifact, cached_of(artifact.digest)):
            top = PurePosixPath(rel).parts[0]
            if top in (ROOTFS, UPPER, WORK):
                return (f"{describe(artifact)}: {top!r} at the top of the instance's directory is the "
                        "container's overlay: give it another dest")
    return None


def artifact_binds(artifacts: list[Artifact], cached_of: Callable[[str], Path], directory: Path, rootfs: Path,
                   cwd: str, owner: tuple[int, int], read_only: bool) -> list[BindMount]:
    """The bind mounts that show what the process executor placed in the instance's `directory` inside the
    container, at each artifact's dest relative to the working dir `cwd` (an app's code on its base image,
    as Diego's droplet on its rootfs). Their mount points are made here, as root, in the overlay `rootfs`:
    the image's directories are the host root's, which the container's own root is not."""
    binds: list[BindMount] = []
    for artifact in artifacts:
        cached = cached_of(artifact.digest)
        for rel in placed_paths(artifact, cached):
            inside = PurePosixPath(cwd) / rel
            if artifact.dest == "." and (cached / rel).is_symlink():  # a link of the tree's own: as is
                _make_in_rootfs(rootfs, inside, owner, link=os.readlink(cached / rel))
                continue
            source = Path(os.path.realpath(directory / rel))  # a tree at "." is bound below .artifacts
            if source != directory and directory not in source.parents:
                raise OSError(f"artifact at {rel}: placed outside the instance's directory")
            _make_in_rootfs(rootfs, inside, owner, directory=source.is_dir())
            binds.append(BindMount(str(source), str(inside), read_only))
    return binds


def _make_in_rootfs(rootfs: Path, inside: PurePosixPath, owner: tuple[int, int], *, directory: bool = False,
                    link: str | None = None) -> None:
    """Make `inside` in the container's root filesystem (a mount point, or the symbolic link `link`) with
    the directories above it, `owner`'s. A symbolic link on the way is refused: the host's root resolves
    it, and an image's absolute link would lead out of the container."""
    path, parts = rootfs, inside.parts[1:]
    for i, part in enumerate(parts):
        path = path / part
        last = i == len(parts) - 1
        if path.is_symlink():
            if last and link is not None:
                path.unlink()
            else:
                raise OSError(f"cannot mount an artifact at {inside}: {'/' + '/'.join(parts[:i + 1])} is a "
                              "symbolic link in the image")
        if last and link is not None:
            if path.is_dir():
                shutil.rmtree(path)
            path.unlink(missing_ok=True)
            os.symlink(link, path)
            os.lchown(path, *owner)
        elif path.exists():
            continue
        elif last and not directory:
            path.touch(mode=0o444)
        else:
            path.mkdir(mode=0o755)
            os.chown(path, *owner)


class ContainerExecutor(ProcessExecutor):
    def __init__(self, data_dir: Path, cell_id: str, *, runtime: Runtime, network: cni.Network,
                 images: ImageStore, userns: bool | None = None, init: Path = DEFAULT_INIT,
                 **kwargs: Any) -> None:
        super().__init__(data_dir, cell_id, **kwargs)
        self.runtime = runtime
        self.init = init
        self.network = network
        self.images = images
        self.userns = userns_allowed() if userns is None else userns
        self._key = rep_key(data_dir)
        self.runc_root = RUNC_ROOT / self._key
        self.userns_dir = USERNS_ROOT / self._key  # bind mounts keeping the containers' user namespaces
        self.state_dir = Path(data_dir) / cell_id / STATE_DIR
        self._containers: dict[str, _Container] = {}

    @property
    def _keep(self) -> list[str]:
        """runc's `run --keep` keeps the container's cgroup past its end, for its OOM count (`_exited`);
        crun (1.8) has no such flag and removes it: an OOM under crun reads as its signal alone."""
        return ["--keep"] if self.runtime.name == "runc" else []

    @property
    def isolation_name(self) -> str:
        user = "userns" if self.userns else "no-userns"
        return f"{self.runtime.title} {user} {super().isolation_name}"

    def _container_id(self, guid: str) -> str:
        return f"vd-{self._key[:8]}-{guid}"

    # --- lifecycle --------------------------------------------------------------------------------

    async def open(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.runc_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.network.ipam_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        await self.cleanup_leftovers()
        try:
            await asyncio.to_thread(cni.set_egress, self.network)
        except cni.CNIError as exc:
            raise IsolationError(f"--executor container: cannot set the cell's egress rules: {exc}") from None
        await super().open()

    async def cleanup_leftovers(self) -> list[str]:
        """What a previous run left (it was killed): its containers deleted from runc's state, their
        overlays unmounted, their networks DELeted and namespaces removed, runc's cgroups emptied."""
        found: list[str] = []
        for cid in await self._runtime_list():
            await self._runtime(["delete", "--force", cid])
            found.append(cid)
        prefix = self._container_id("")
        for state_dir in sorted(self.state_dir.iterdir()) if self.state_dir.is_dir() else []:
            record = _read_state(state_dir)
            cid = str(record.get("container_id", prefix + state_dir.name))
            found.append(cid)
            await self._teardown(cid, Path(record["rootfs"]) if "rootfs" in record else None,
                                 [(int(h), int(c)) for h, c in record.get("ports", [])], record.get("cni"))
            shutil.rmtree(state_dir, ignore_errors=True)
        for ns_dir in (cni.NETNS_DIR, self.userns_dir):  # namespaces made before their state file was
            for ns in sorted(ns_dir.iterdir()) if ns_dir.is_dir() else []:
                if ns.name.startswith(prefix) and ns.exists():
                    await self._teardown(ns.name, None, [], None)
                    found.append(ns.name)
        await asyncio.to_thread(self._sweep_inner_cgroups, None)
        if found:
            log.info("removed the containers a previous run left",
                     extra={"data": {"containers": sorted(set(found))}})
        return sorted(set(found))

    async def close(self) -> None:
        await super().close()
        await self.cleanup_leftovers()  # anything a stop could not finish
        await asyncio.to_thread(cni.clear_egress, self.network)
        await asyncio.to_thread(cni.remove_bridge, self.network)
        for level in (self.runc_root, self.userns_dir):
            with contextlib.suppress(OSError):
                level.rmdir()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    # --- which work runs in a container ---------------------------------------------------------------

    def start_lrp(self, container: LRPContainer, listener: ExecutorListener) -> None:
        image = container.desired.image
        if image is not None:
            self._containers[container.instance_guid] = _Container(image,
                                                                   self._container_id(container.instance_guid))
        super().start_lrp(container, listener)

    def run_task(self, container: TaskContainer, listener: ExecutorListener) -> None:
        image = container.task.image
        if image is not None:
            self._containers[container.task_guid] = _Container(image, self._container_id(container.task_guid))
        super().run_task(container, listener)

    def _lrp_ports(self, c: LRPContainer) -> tuple[list[PortMapping], str | None]:
        ctr = self._containers.get(c.instance_guid)
        if ctr is None:
            return super()._lrp_ports(c)
        ports = [PortMapping(container_port=p, host_port=free_port())
                 for p in (c.desired.ports or [DEFAULT_CONTAINER_PORT])]
        ctr.ports = [(p.host_port, p.container_port) for p in ports]
        return ports, str(ports[0].container_port)

    def _env(self, child: _Child, requested: dict[str, str], own: dict[str, str]) -> dict[str, str]:
        ctr = self._containers.get(child.guid)
        if ctr is None:
            return super()._env(child, requested, own)
        cwd = ctr.image.working_dir or "/"
        return {"PATH": DEFAULT_PATH, "HOME": cwd, **requested, **own}

    # --- exec ----------------------------------------------------------------------------------------------

    async def open_exec(self, instance_guid: str, argv: list[str], tty: bool, rows: int,
                        cols: int) -> ExecSession:
        """In a container: `runc exec` of the container's own process spec with `argv`
        (rep/container_exec.py): its namespaces, cgroup, user, capabilities, seccomp, environment and working
        dir; runc itself in the instance's cgroup. Killed when the session ends or the instance stops."""
        ctr = self._containers.get(instance_guid)
        child = self._lrps.get(instance_guid)
        if ctr is None:
            return await super().open_exec(instance_guid, argv, tty, rows, cols)
        if child is None or not child.running or child.proc is None or child.proc.returncode is not None:
            raise ExecRefused(f"instance {instance_guid} is not running on cell {self.cell_id}")
        try:
            config = json.loads((self.state_dir / child.guid / "config.json").read_text())
            process = exec_process(config["process"], argv, tty, rows, cols)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ExecRefused(f"could not read the container's process spec: {exc}") from None
        cgroup = child.sandbox.cgroup
        session = await ContainerExecSession.enter(
            self.runtime.path, self.runc_root, ctr.container_id, process,
            preexec=child_preexec(data_limit_bytes=None, uid=None, gid=None,
                                  cgroup_procs=cgroup.procs_files if cgroup is not None else ()))
        if not child.running:
            await session.close()
            raise ExecRefused(f"instance {instance_guid} stopped")
        child.execs.add(session)
        session.on_close = lambda: child.execs.discard(session)
        return session

    # --- the hooks of the process executor ----------------------------------------------------------------

    async def _place_artifacts(self, child: _Child, artifacts: list[Artifact]) -> None:
        ctr = self._containers.get(child.guid)
        if ctr is not None:
            ctr.lower = await self.images.ensure(child.guid, ctr.image)
            ctr.artifacts = list(artifacts)
        await super()._place_artifacts(child, artifacts)
        if ctr is not None and self.artifacts is not None:
            why = overlay_clash(artifacts, self.artifacts.path_of)
            if why is not None:
                raise ArtifactError(why)

    async def _spawn(self, child: _Child, argv: list[str], env: dict[str, str],
                     origin: Origin) -> asyncio.subprocess.Process:
        ctr = self._containers.get(child.guid)
        if ctr is None:
            return await super()._spawn(child, argv, env, origin)
        sandbox = child.sandbox
        if sandbox.user is None or sandbox.cgroup is None or ctr.lower is None:
            raise OSError("a container needs the instance's user, cgroup and image")
        user, cgroup = sandbox.user, sandbox.cgroup
        cwd = ctr.image.working_dir or "/"
        bundle = self.state_dir / child.guid
        bundle.mkdir(mode=0o700, exist_ok=True)
        rootfs = sandbox.directory / ROOTFS
        _write_state(bundle, {"container_id": ctr.container_id, "rootfs": str(rootfs), "ports": ctr.ports})
        began = time.monotonic()
        took: dict[str, float] = {"isolate_and_place_s": round(began - ctr.created, 3)}
        lower = ctr.lower

        async def make_rootfs() -> None:
            await asyncio.to_thread(_prepare_rootfs, lower, sandbox.directory, cwd, user.uid, user.gid)
            ctr.mounted = True
            took["rootfs_s"] = round(time.monotonic() - began, 3)

        async def make_network() -> None:
            # In a `links_turn` (rep/cni.py): namespaces, loopback, the bridge and an address lease; the port
            # mappings come after, in an `iptables_turn` (map_ports), so that one start's veth is made while
            # others' port mappings change iptables.
            try:
                async with cni.links_turn():
                    took["links_wait_s"] = round(time.monotonic() - began, 3)
                    if self.userns:
                        ctr.userns, ctr.netns = await cni.make_namespaces(ctr.container_id, self.userns_dir,
                                                                          user.uid, user.gid)
                    else:
                        ctr.netns = await cni.make_netns(ctr.container_id)
                    took["namespaces_s"] = round(time.monotonic() - began, 3)
                    ctr.cni_result = await cni.add_links(self.network, ctr.container_id, ctr.netns, took,
                                                         loopback=not self.userns)
                    assert ctr.cni_result is not None
                    ctr.address = cni.address_of(ctr.cni_result)
            except cni.CNIError as exc:
                raise OSError(str(exc)) from None
            took["links_s"] = round(time.monotonic() - began, 3)

        async def map_ports(netns: Path, links: dict[str, Any]) -> None:
            at = time.monotonic()
            try:
                async with cni.iptables_turn():
                    took["iptables_wait_s"] = round(time.monotonic() - at, 3)
                    ctr.cni_result = await cni.add_ports(self.network, ctr.container_id, netns, ctr.ports,
                                                         links, took)
            except cni.CNIError as exc:
                raise OSError(str(exc)) from None
            # The state file keeps the links' result: portmap passes it through unchanged.
            took["ports_mapped_s"] = round(time.monotonic() - began, 3)

        # Independent: the overlay and the network are made at once (each is undone by `_teardown`).
        outcomes = await asyncio.gather(make_rootfs(), make_network(), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        assert ctr.netns is not None and ctr.cni_result is not None and ctr.address is not None
        _write_state(bundle, {"container_id": ctr.container_id, "rootfs": str(rootfs), "ports": ctr.ports,
                              "cni": ctr.cni_result})
        # The ports are mapped while runc starts the container: an instance is reported running once both
        # its health check (on its own address, `_target`) and its mappings are done (`_wait_healthy`).
        # Work with no health check to wait for (a task) waits for its mappings here.
        mapping = ctr.mapping = asyncio.ensure_future(map_ports(ctr.netns, ctr.cni_result))
        if child.guid not in self._lrps:
            await mapping
        ctr.inner = _inner(cgroup, ctr.container_id)
        binds: list[BindMount] = []
        if ctr.artifacts and self.artifacts is not None:
            # Read-only binds where the process executor bound the cached trees read-only (the instance's
            # own filesystem); else the placed links, whose files are read-only and root's already.
            binds = await asyncio.to_thread(
                artifact_binds, ctr.artifacts, self.artifacts.path_of, sandbox.directory, rootfs, cwd,
                (user.uid, user.gid), sandbox.disk_image is not None)
        binds += [BindMount(str(p), f"/etc/{p.name}") for p in (Path("/etc/resolv.conf"),) if p.is_file()]
        # The init's mount point, the host root's as the image's files are (the spec binds it read-only).
        await asyncio.to_thread(_make_in_rootfs, rootfs, PurePosixPath(INIT_PATH), (0, 0))
        hosts = bundle / "hosts"
        hosts.write_text(f"127.0.0.1 localhost\n::1 localhost\n{ctr.address} {child.guid[:63]}\n")
        hosts.chmod(0o644)
        binds.append(BindMount(str(hosts), "/etc/hosts"))
        spec = runtime_spec(ContainerSpec(
            rootfs=str(rootfs), argv=argv, env=env, cwd=cwd, hostname=child.guid[:63],
            netns=str(ctr.netns), cgroup=ctr.container_id, host_uid=user.uid, host_gid=user.gid,
            userns=self.userns, binds=binds, userns_path=str(ctr.userns) if ctr.userns else None,
            init=str(self.init)))
        (bundle / "config.json").write_text(json.dumps(spec))
        output = OutputLog(sandbox.directory, self.log_cap_bytes)
        try:
            proc = await asyncio.create_subprocess_exec(
                self.runtime.path, "--root", str(self.runc_root), "run", *self._keep, "--bundle", str(bundle),
                ctr.container_id,
                cwd=bundle, env={"PATH": DEFAULT_PATH}, stdin=subprocess.DEVNULL,
                stdout=output.writer, stderr=output.stderr_writer, start_new_session=True,
                preexec_fn=child_preexec(data_limit_bytes=None, cgroup_procs=cgroup.procs_files,
                                         uid=None, gid=None))
        except BaseException:
            output.close()
            raise
        output.start()
        child.output = output
        self.logs.started(origin, sandbox.directory, output)
        child.proc = proc
        took["spec_s"] = round(time.monotonic() - began, 3)
        ctr.took, ctr.spawned = took, time.monotonic()
        return proc

    async def _wait_healthy(self, child: _Child, proc: asyncio.subprocess.Process, check: HealthCheck,
                            ports: list[PortMapping]) -> bool:
        """Healthy and its ports mapped (a failed mapping raises: the start failed)."""
        healthy = await super()._wait_healthy(child, proc, check, ports)
        ctr = self._containers.get(child.guid)
        if ctr is None:
            return healthy
        ctr.took["runc_to_healthy_s"] = round(time.monotonic() - ctr.spawned, 3)
        if ctr.mapping is not None:  # shielded: a cancelled start must not kill portmap half way
            await asyncio.shield(ctr.mapping)
        # where a start's time went: `tests/bench/containers.py --logs`
        log.debug("container started", extra={"data": {
            **ctr.took, "runc_to_running_s": round(time.monotonic() - ctr.spawned, 3), "healthy": healthy}})
        return healthy

    def _check_address(self, child: _Child) -> str | None:
        """A container's checks connect to its own address at the container port, as kubelet probes a pod's:
        no port mapping on the way, so they can run while the mappings are still being made."""
        ctr = self._containers.get(child.guid)
        return ctr.address if ctr is not None else None

    async def _terminate(self, child: _Child, proc: asyncio.subprocess.Process, grace_s: float) -> None:
        ctr = self._containers.get(child.guid)
        if ctr is None or ctr.inner is None:
            await super()._terminate(child, proc, grace_s)
            return
        inner = ctr.inner
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        # SIGTERM to every process of the container (tini, its pid 1, forwards it to the app too), again
        # while runc may still be creating it.
        while proc.returncode is None and loop.time() < deadline:
            inner.signal_all(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()),
                                       min(0.1, max(0.01, deadline - loop.time())))
        kill_deadline = loop.time() + RUNTIME_TIMEOUT_S
        while proc.returncode is None:
            inner.kill_now()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(proc.wait()), 0.05)
            if loop.time() > kill_deadline:
                os.kill(proc.pid, signal.SIGKILL)  # runc itself would not end: its container is dead
                await proc.wait()
        await self._runtime(["delete", "--force", ctr.container_id])  # its cgroup, before the instance's
        if child.sandbox.cgroup is not None:
            await child.sandbox.cgroup.kill()

    async def _exited(self, child: _Child, returncode: int) -> str:
        ctr = self._containers.get(child.guid)
        if ctr is None:
            return await super()._exited(child, returncode)
        if returncode > 128:
            returncode = -(returncode - 128)  # runc's 128+N: the app (tini's status), or tini, killed by N
        # cgroup v1 counts an OOM kill in the victim's own cgroup: runc's, kept (`run --keep`) until now.
        oom = ctr.inner is not None and ctr.inner.oom_kills() > 0
        await self._runtime(["delete", "--force", ctr.container_id])  # its cgroup, before the instance's
        reason = await super()._exited(child, returncode)
        if oom and reason == exit_reason(returncode):
            reason = f"out of memory ({reason})"
        return reason

    def _kill_now(self, child: _Child) -> None:
        ctr = self._containers.get(child.guid)
        if ctr is not None and ctr.inner is not None:
            ctr.inner.kill_now()
        super()._kill_now(child)

    async def _release(self, child: _Child, *, keep_log: bool) -> None:
        ctr = self._containers.pop(child.guid, None)
        if ctr is not None:
            if ctr.mapping is not None:  # let a mapping under way finish (bounded by the plugin's timeout)
                await asyncio.wait([ctr.mapping])  # first: its DEL below removes what it added
                if not ctr.mapping.cancelled():
                    ctr.mapping.exception()  # retrieved: its failure was reported, or nobody waited on it
            try:
                if ctr.inner is not None:
                    await ctr.inner.kill()
                rootfs = child.sandbox.directory / ROOTFS if ctr.mounted else None
                await self._teardown(ctr.container_id, rootfs, ctr.ports, ctr.cni_result)
            except Exception:
                log.exception("a container's teardown failed; the next start sweeps it",
                              extra={"data": {"container": ctr.container_id}})
            else:
                shutil.rmtree(self.state_dir / child.guid, ignore_errors=True)
            # Never delete through a live overlay (its own device: os.path.ismount, not mountinfo, which a
            # cell with a hundred overlays and disks makes costly to read at every stop).
            if not os.path.ismount(child.sandbox.directory / ROOTFS):
                for name in (UPPER, WORK, ROOTFS):
                    shutil.rmtree(child.sandbox.directory / name, ignore_errors=True)
        await super()._release(child, keep_log=keep_log)

    async def _teardown(self, cid: str, rootfs: Path | None, ports: list[tuple[int, int]],
                        result: dict[str, Any] | None) -> None:
        """runc's state, the overlay, the network and its namespace of one container: each tried."""
        await self._runtime(["delete", "--force", cid])
        if rootfs is not None and os.path.ismount(rootfs):
            await asyncio.to_thread(_unmount, rootfs)
        netns = cni.netns_path(cid)
        async with cni.iptables_turn():  # portmap's DEL changes iptables
            try:
                await cni.delete(self.network, cid, netns, ports, result)
            except (cni.CNIError, OSError) as exc:
                log.warning("CNI DEL failed", extra={"data": {"container": cid, "error": str(exc)}})
            await cni.remove_netns(cid)
            cni.unbind_ns(self.userns_dir / cid)
        await asyncio.to_thread(self._sweep_inner_cgroups, cid)

    # --- runc ---------------------------------------------------------------------------------------------

    async def _runtime(self, args: list[str]) -> tuple[int, str]:
        if not self.runc_root.is_dir():
            return 0, ""
        code, out, _ = await run_captured([self.runtime.path, "--root", str(self.runc_root), *args],
                                          timeout_s=RUNTIME_TIMEOUT_S)
        return code, out.decode(errors="replace")  # its standard output alone: `list` answers JSON there

    async def _runtime_list(self) -> list[str]:
        code, out = await self._runtime(["list", "--format", "json"])
        if code != 0 or not out.strip() or out.strip() == "null":
            return []
        try:
            return [str(c["id"]) for c in json.loads(out)]
        except (ValueError, KeyError, TypeError):
            return []

    def _sweep_inner_cgroups(self, cid: str | None) -> None:
        """Remove runc's cgroups of one container (`cid`), or of every container of this rep (None): in the
        hierarchies the rep manages they are below the instances' cgroups, in the others below the rep's own
        cgroup. What is left in them is killed first."""
        prefix = cid if cid is not None else self._container_id("")
        try:
            mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
            own = parse_proc_cgroup(Path("/proc/self/cgroup").read_text())
        except OSError:
            return
        candidates: list[Path] = []
        cells = self._cgroups.dirs if self._cgroups is not None else ()
        for cell in cells:
            with contextlib.suppress(OSError):
                for instance in cell.iterdir():
                    if instance.is_dir():
                        candidates += [d for d in instance.iterdir()
                                       if d.is_dir() and d.name.startswith(prefix)]
        for mount in mounts:
            if mount.fstype != "cgroup":
                continue
            controllers = [o for o in mount.options if o in own]
            path = own.get(controllers[0]) if controllers else None
            if path is None:
                continue
            base = mount.point / path.lstrip("/")
            with contextlib.suppress(OSError):
                candidates += [d for d in base.iterdir() if d.is_dir() and d.name.startswith(prefix)]
        for directory in candidates:
            _empty_and_remove(directory)


def _inner(cgroup: InstanceCgroup, name: str) -> InstanceCgroup:
    return InstanceCgroup(cgroup.version, tuple(d / name for d in cgroup.dirs), cgroup.memory / name,
                          cgroup.freezer / name if cgroup.freezer is not None else None,
                          cgroup.cpuacct / name if cgroup.cpuacct is not None else None)


def _empty_and_remove(directory: Path) -> None:
    for _ in range(100):
        try:
            pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)  # the killed processes leave the cgroup within milliseconds


def _write_state(bundle: Path, record: dict[str, Any]) -> None:
    part = bundle / "state.json.part"
    part.write_text(json.dumps(record))
    os.replace(part, bundle / "state.json")


def _read_state(bundle: Path) -> dict[str, Any]:
    try:
        record = json.loads((bundle / "state.json").read_text())
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}



def sweep_containers(data_dir: Path) -> list[str]:
    """What a container rep on `data_dir` left (it was killed and will not start again), removed as its
    next start would: for whoever stops a rep for good (rep/isolation.py sweep_rep). Never while it runs."""
    runtime = detect_runtime()
    if runtime is None or os.geteuid() != 0:
        return []
    key = rep_key(data_dir)
    found: list[str] = []
    for state_dir in sorted(Path(data_dir).glob(f"*/{STATE_DIR}")):
        cell_id = state_dir.parent.name
        # The subnet is not known here (the rep's flag): the egress rules go by their comment.
        network = cni.Network(name=f"vendue-{key}", bridge=cni.bridge_of(key), subnet="10.244.0.0/22",
                              ipam_dir=Path(data_dir) / cell_id / "cni")
        executor = ContainerExecutor(data_dir, cell_id, runtime=runtime, network=network,
                                     images=None)  # type: ignore[arg-type]  # nothing is pulled
        found += asyncio.run(executor.cleanup_leftovers())
        cni.clear_egress(network)
        cni.remove_rules_of(network)
        cni.remove_bridge(network)
        shutil.rmtree(state_dir, ignore_errors=True)
    for level in (RUNC_ROOT / key, USERNS_ROOT / key):
        with contextlib.suppress(OSError):
            level.rmdir()
    return found
