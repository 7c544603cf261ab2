"""Per-instance cgroups: found, made, limited, emptied and removed (the process executor's isolation).

Which hierarchy. cgroup v2 when a cgroup2 mount at or under the cgroup filesystem root (/sys/fs/cgroup)
offers memory, pids and cpu to the rep's cgroup; else cgroup v1, with a `memory`, a `pids` and a `cpu`
hierarchy (cpu is often mounted together with cpuacct, `cpu,cpuacct`), and the `freezer` one when there is
one. The mounts come from /proc/self/mountinfo, never from hard-coded paths; the rep's own cgroup in each
hierarchy from /proc/self/cgroup.

Where. Instance <guid> of cell <cell> is <base>/<cell>/<guid> in every hierarchy, <base> being the rep's
OWN cgroup + /vendue/<rep-key>, so that apps stay inside whatever cgroup the rep's supervisor put it in
(its limits and accounting cover them too), or `--cgroup-parent` + /<rep-key> (absolute from each
hierarchy's root, as kubelet's --cgroup-root). <rep-key> tells the reps of one machine apart
(rep/isolation.py). cgroup v2 wants the controllers enabled in cgroup.subtree_control of every level from
the rep's cgroup down, which the kernel refuses in a cgroup that holds processes ("no internal
processes"): as a delegated service does (systemd Delegate=yes), the rep then moves itself into a leaf of
its own, <base>/rep, and enables them. Other processes in the rep's cgroup still stand in the way: give the
rep a cgroup of its own, or `--cgroup-parent`.

Limits. memory = memory_mb with swap included (v1: memory.limit_in_bytes, then memory.memsw.limit_in_bytes
where the kernel accounts swap; v2: memory.max and memory.swap.max = 0); pids.max; CPU shares as Diego
gives them: weight = 100 * min(memory_mb, 8192) / 8192, shares = max(2, 1024 * weight / 100) (v1
cpu.shares; v2 cpu.weight, converted from the shares as runc does).

Joining. The child writes "0" (itself) to the cgroup.procs of each of its cgroups between fork and exec,
while still root (common/procutil.child_preexec): nothing it ever forks is outside.

Killing. `stop` sends SIGTERM to every process in the cgroup, waits until it is empty or the grace passed,
then `kill`s: v2 cgroup.kill where the kernel has it; else freeze (v1 freezer.state, v2 cgroup.freeze),
SIGKILL every member, thaw, until cgroup.procs is empty. A setsid, a double fork, a new process group or a
scrubbed environment does not leave a cgroup. Then the cgroup is removed; the levels above it go when the
cell closes (`CellCgroups.remove`).

OOM. oom_kill in v1 memory.oom_control, v2 memory.events, counts the OOM killer's victims in the cgroup.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger("rep.cgroups")

CGROUP_FS = Path("/sys/fs/cgroup")
REQUIRED = ("memory", "pids", "cpu")
# v1 hierarchies used where mounted: freezer to kill, cpuacct to measure CPU use (often one with cpu).
OPTIONAL = ("freezer", "cpuacct")
OWN_LEVEL = "vendue"  # below the rep's own cgroup, unless --cgroup-parent names the place
REP_LEAF = "rep"  # cgroup v2: where the rep moves itself, <base>/rep, to enable controllers in its own cgroup
PROCS = "cgroup.procs"
# A SIGKILLed process leaves its cgroup within milliseconds; one that does not within this much is stuck in
# the kernel (uninterruptible I/O): the cgroup is left for the next attempt (the rep's next start).
KILL_TIMEOUT_S = 30.0
DIEGO_MAX_WEIGHT_MB = 8192  # Diego: memory beyond 8 GiB earns no more CPU weight
MAX_SHARES = 1024
CELL_MAX_SHARES = 262144  # cgroup v1's ceiling for cpu.shares
V2_DEFAULT_WEIGHT = 100  # cgroup v2's cpu.weight of a cgroup nobody weighed (v1: 1024 shares)
CELL_MAX_WEIGHT = 10000

Version = Literal["cgroup-v1", "cgroup-v2"]


class CgroupsUnavailable(Exception):
    """The controllers this rep needs are missing or not writable (one line that says which)."""


class _Busy(CgroupsUnavailable):
    """cgroup v2 refused to enable controllers in a cgroup that holds processes."""


@dataclass(frozen=True, slots=True)
class Limits:
    memory_bytes: int
    pids: int
    cpu_shares: int  # v1's scale, 2..1024


def cpu_shares(memory_mb: int) -> int:
    """Diego's CPU weight (proportional to memory, up to 8 GiB) as cgroup v1 shares."""
    weight = 100 * min(memory_mb, DIEGO_MAX_WEIGHT_MB) // DIEGO_MAX_WEIGHT_MB
    return max(2, MAX_SHARES * weight // 100)


def cpu_weight(shares: int) -> int:
    """cgroup v1 shares (2..262144) as cgroup v2 cpu.weight (1..10000): runc's conversion."""
    return 1 + ((shares - 2) * 9999) // 262142


def limits_for(memory_mb: int, pids: int) -> Limits:
    return Limits(memory_mb * 1024 * 1024, pids, cpu_shares(memory_mb))


# --- finding the hierarchies ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mount:
    root: str  # the part of the hierarchy mounted here ("/" unless a container sees only its own)
    point: Path
    fstype: str
    options: frozenset[str]  # the super options: a v1 hierarchy's controllers


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup mounts of /proc/self/mountinfo: `id parent major:minor root point options ... - fstype
    source super-options`."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or not tail or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = frozenset(tail[2].split(",")) if len(tail) > 2 else frozenset()
        mounts.append(Mount(_unescape(fields[3]), Path(_unescape(fields[4])), tail[0], options))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup as controller -> path ("" for the cgroup v2 line `0::/path`)."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            paths[controller] = parts[2]
    return paths


def _in_mount(mount: Mount, cgroup_path: str) -> Path:
    """Where cgroup `cgroup_path` (from the hierarchy's root) is in this mount of it."""
    relative = cgroup_path
    if mount.root != "/" and (cgroup_path == mount.root or cgroup_path.startswith(mount.root + "/")):
        relative = cgroup_path[len(mount.root):]
    return mount.point / relative.lstrip("/")


def _under(point: Path, root: Path) -> bool:
    return point == root or root in point.parents


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One cgroup hierarchy as this rep uses it."""

    controllers: frozenset[str]
    top: Path  # the rep's own cgroup in it, or the hierarchy's root with --cgroup-parent
    levels: tuple[str, ...]  # below `top`: vendue/<rep-key>, or the parent's path and <rep-key>
    own: bool = True  # `top` is the rep's own cgroup (not --cgroup-parent's root)

    @property
    def base(self) -> Path:
        return self.top.joinpath(*self.levels)


@dataclass(frozen=True, slots=True)
class Cgroups:
    """The hierarchies a rep puts its instances in (found by `detect`)."""

    version: Version
    hierarchies: tuple[Hierarchy, ...]

    def cell(self, cell_id: str) -> CellCgroups:
        return CellCgroups(self, cell_id)

    def remove_rep_levels(self) -> None:
        """Remove the rep's own level (`base`) and the empty ones above it, in each hierarchy: what is left
        of a rep that died before it opened a cell, or after its cells were removed."""
        for h in self.hierarchies:
            remove_empty_levels(h.base, h.top)

    def cell_ids(self) -> list[str]:
        """The cells this rep has (or had) cgroups for."""
        found: set[str] = set()
        for h in self.hierarchies:
            with contextlib.suppress(FileNotFoundError):
                found.update(
                    entry.name for entry in h.base.iterdir() if entry.is_dir() and entry.name != REP_LEAF
                )
        return sorted(found)


def remove_empty_levels(path: Path, top: Path) -> None:
    """rmdir `path` and each level above it below `top`, stopping at the first that is not empty."""
    while path != top and top in path.parents:
        try:
            path.rmdir()
        except OSError:
            return  # not empty (another cell, another rep), or gone already
        path = path.parent


def detect(
    rep_key: str,
    *,
    fs_root: Path = CGROUP_FS,
    parent: str | None = None,
    mountinfo: str | None = None,
    proc_cgroup: str | None = None,
) -> Cgroups:
    """The hierarchies under `fs_root` this rep can isolate with; CgroupsUnavailable says what is missing.
    Reads only (nothing is made until a cell opens). `mountinfo` and `proc_cgroup` replace
    /proc/self/mountinfo and /proc/self/cgroup (tests with a fake cgroupfs)."""
    try:
        mounts_text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
        cgroup_text = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    except OSError as exc:
        raise CgroupsUnavailable(f"cannot read this process's cgroups: {exc}") from None
    mounts = [m for m in parse_mountinfo(mounts_text) if _under(m.point, fs_root)]
    own = parse_proc_cgroup(cgroup_text)
    parent_levels = tuple(part for part in (parent or "").split("/") if part)
    problems: list[str] = []

    for mount in (m for m in mounts if m.fstype == "cgroup2"):
        top = mount.point if parent else _in_mount(mount, own.get("", "/"))
        try:
            offered = set((top / "cgroup.controllers").read_text().split())
        except OSError as exc:
            problems.append(
                f"cgroup v2 at {mount.point}: cannot read {top}/cgroup.controllers ({exc.strerror})"
            )
            continue
        missing = [c for c in REQUIRED if c not in offered]
        if missing:
            problems.append(f"cgroup v2 at {mount.point} does not offer {', '.join(missing)} to {top} "
                            f"(it offers: {' '.join(sorted(offered)) or 'nothing'})")
            continue
        levels = (*parent_levels, rep_key) if parent else (OWN_LEVEL, rep_key)
        return Cgroups("cgroup-v2", (Hierarchy(frozenset(REQUIRED), top, levels, own=not parent),))

    v1 = [m for m in mounts if m.fstype == "cgroup"]
    by_controller: dict[str, Mount] = {}
    for mount in v1:
        for controller in (*REQUIRED, *OPTIONAL):
            if controller in mount.options:
                by_controller.setdefault(controller, mount)
    missing = [c for c in REQUIRED if c not in by_controller]
    if v1 and not missing:
        hierarchies: dict[Path, Hierarchy] = {}
        for controller, mount in by_controller.items():
            if mount.point in hierarchies:
                continue
            top = mount.point if parent else _in_mount(mount, own.get(controller, "/"))
            levels = (*parent_levels, rep_key) if parent else (OWN_LEVEL, rep_key)
            hierarchies[mount.point] = Hierarchy(
                mount.options & {*REQUIRED, *OPTIONAL}, top, levels, own=not parent
            )
        return Cgroups("cgroup-v1", tuple(hierarchies.values()))
    if v1:
        found = sorted(by_controller)
        problems.append(f"no cgroup v1 {', '.join(missing)} hierarchy under {fs_root} "
                        f"(found: {', '.join(found) or 'none of memory, pids, cpu'})")
    if not problems:
        problems.append(f"no cgroup filesystem mounted under {fs_root}")
    raise CgroupsUnavailable("; ".join(problems))


# --- a cell's cgroups -----------------------------------------------------------------------------


def _makedirs(path: Path) -> None:
    """mkdir -p that survives another rep removing an empty level above at the same moment."""
    for _ in range(5):
        try:
            path.mkdir(parents=True, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    path.mkdir(parents=True, exist_ok=True)


def _enable_controllers(directory: Path) -> None:
    """cgroup v2: let the cgroups below `directory` use the controllers."""
    try:
        (directory / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in REQUIRED))
    except OSError as exc:
        problem = f"cannot enable {', '.join(REQUIRED)} in {directory}/cgroup.subtree_control: {exc.strerror}"
        if exc.errno == errno.EBUSY:
            raise _Busy(f"{problem} (it holds processes: run the rep in a cgroup delegated to it alone, or "
                        "give --cgroup-parent)") from None
        raise CgroupsUnavailable(problem) from None


def _enable_below_own(h: Hierarchy) -> None:
    """cgroup v2: enable the controllers in the rep's own cgroup, which holds the rep: the kernel refuses
    while it does, so the rep moves itself into its leaf (<base>/rep) and tries again."""
    try:
        _enable_controllers(h.top)
    except _Busy:
        if not h.own:
            raise
        leaf = h.base / REP_LEAF
        _makedirs(leaf)
        (leaf / PROCS).write_text(str(os.getpid()))
        _enable_controllers(h.top)  # still busy: other processes share the rep's cgroup


class CellCgroups:
    """One cell's level in every hierarchy, and the instances' cgroups below it."""

    def __init__(self, cgroups: Cgroups, cell_id: str) -> None:
        self.version = cgroups.version
        self.hierarchies = cgroups.hierarchies
        self.cell_id = cell_id
        self.dirs = tuple(h.base / cell_id for h in cgroups.hierarchies)
        self._live: set[str] = set()
        self._weighed = 0  # the instance count the cell's CPU weight was last written for

    def open(self) -> None:
        """Make the cell's level (and those above it) in every hierarchy: proves they are writable."""
        for h in self.hierarchies:
            try:
                path = h.top
                if self.version == "cgroup-v2":
                    _enable_below_own(h)
                for level in (*h.levels, self.cell_id):
                    path = path / level
                    _makedirs(path)
                    if self.version == "cgroup-v2":
                        _enable_controllers(path)
            except OSError as exc:
                raise CgroupsUnavailable(f"cannot make {exc.filename or h.base}: {exc.strerror}") from None
            if self.version == "cgroup-v1":
                cell = h.base / self.cell_id
                for controller, control in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max"),
                                            ("cpu", "cpu.shares")):
                    if controller in h.controllers and not (cell / control).exists():
                        raise CgroupsUnavailable(f"the {controller} controller is missing in {cell} "
                                                 f"(no {control})")

    def create(self, guid: str, limits: Limits) -> InstanceCgroup:
        """An instance's cgroup in every hierarchy, its limits set."""
        cgroup = self._instance(guid)
        for path in cgroup.dirs:
            _makedirs(path)
        try:
            cgroup.set_limits(limits)
        except OSError:
            cgroup.remove()
            raise
        self._live.add(guid)
        self._weigh()
        return cgroup

    def released(self, guid: str) -> None:
        """An instance's cgroup is gone: the cell weighs one instance less."""
        self._live.discard(guid)
        self._weigh()

    def _weigh(self) -> None:
        """The cell's CPU weight against the host's other processes: 1024 shares (v2: weight 100, the
        default of a process) per instance it holds. Diego's shares (∝ memory) only split CPU among the
        instances; without this, 100 instances in one cgroup would together weigh what one unisolated
        process does, and isolated apps would start several times slower on a busy host."""
        count = max(1, len(self._live))
        if count == self._weighed:
            return
        for h, cell in zip(self.hierarchies, self.dirs, strict=True):
            if self.version == "cgroup-v2":
                control, value = cell / "cpu.weight", min(CELL_MAX_WEIGHT, V2_DEFAULT_WEIGHT * count)
            elif "cpu" in h.controllers:
                control, value = cell / "cpu.shares", min(CELL_MAX_SHARES, MAX_SHARES * count)
            else:
                continue
            with contextlib.suppress(OSError):  # a weight not written costs speed, never correctness
                control.write_text(str(value))
        self._weighed = count

    def leftovers(self) -> list[InstanceCgroup]:
        """The instances' cgroups a previous run of this rep left (it died without stopping them)."""
        guids: set[str] = set()
        for cell in self.dirs:
            with contextlib.suppress(FileNotFoundError):
                guids.update(entry.name for entry in cell.iterdir() if entry.is_dir())
        return [self._instance(guid) for guid in sorted(guids)]

    def _instance(self, guid: str) -> InstanceCgroup:
        dirs, memory, freezer, cpuacct = [], Path(), None, None
        for h, cell in zip(self.hierarchies, self.dirs, strict=True):
            dirs.append(cell / guid)
            if "memory" in h.controllers:
                memory = cell / guid
            if "freezer" in h.controllers or self.version == "cgroup-v2":
                freezer = cell / guid
            if "cpuacct" in h.controllers or self.version == "cgroup-v2":
                cpuacct = cell / guid
        return InstanceCgroup(self.version, tuple(dirs), memory, freezer, cpuacct)

    def remove(self) -> None:
        """Remove the cell's level and every level above it up to the rep's own cgroup, where empty."""
        for h, cell in zip(self.hierarchies, self.dirs, strict=True):
            remove_empty_levels(cell, h.top)


# --- an instance's cgroup -------------------------------------------------------------------------


def _read_counter(path: Path, name: str) -> int:
    """`name N` from a flat keyed file (memory.events, memory.oom_control); 0 when absent."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


def _read_int(path: Path) -> int:
    """A file holding one number (memory.current, memory.usage_in_bytes); 0 when absent or unreadable."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return 0


@dataclass(frozen=True, slots=True)
class InstanceCgroup:
    version: Version
    dirs: tuple[Path, ...]  # one per hierarchy (v2: one)
    memory: Path
    freezer: Path | None  # v1: its freezer cgroup, if there is that hierarchy; v2: the cgroup
    cpuacct: Path | None = None  # v1: its cpuacct cgroup, if there is that hierarchy; v2: the cgroup

    @property
    def procs_files(self) -> tuple[str, ...]:
        """What the child writes itself into (common/procutil.child_preexec)."""
        return tuple(str(d / PROCS) for d in self.dirs)

    def set_limits(self, limits: Limits) -> None:
        for path in self.dirs:
            if self.version == "cgroup-v2":
                (path / "memory.max").write_text(str(limits.memory_bytes))
                (path / "memory.swap.max").write_text("0")
                (path / "pids.max").write_text(str(limits.pids))
                (path / "cpu.weight").write_text(str(cpu_weight(limits.cpu_shares)))
                continue
            if (path / "memory.limit_in_bytes").exists():
                # memory first: memsw may never be below it (both start unlimited).
                (path / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
                if (path / "memory.memsw.limit_in_bytes").exists():
                    (path / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
            if (path / "pids.max").exists():
                (path / "pids.max").write_text(str(limits.pids))
            if (path / "cpu.shares").exists():
                (path / "cpu.shares").write_text(str(limits.cpu_shares))

    def pids(self) -> set[int]:
        """Every process in the cgroup (zombies are not: the kernel moves them out as they exit)."""
        found: set[int] = set()
        for path in self.dirs:
            with contextlib.suppress(FileNotFoundError):
                found.update(int(pid) for pid in (path / PROCS).read_text().split())
        return found

    def memory_bytes(self) -> int:
        """Memory in use as `kubectl top` counts it (the working set): usage less the page cache the
        kernel can drop first (inactive files), so that a log the app wrote does not read as its memory."""
        if self.version == "cgroup-v2":
            usage = _read_int(self.memory / "memory.current")
            inactive = _read_counter(self.memory / "memory.stat", "inactive_file")
        else:
            usage = _read_int(self.memory / "memory.usage_in_bytes")
            inactive = _read_counter(self.memory / "memory.stat", "total_inactive_file")
        return max(0, usage - inactive)

    def cpu_ns(self) -> int | None:
        """CPU time its processes used so far, in nanoseconds (None when no hierarchy accounts it)."""
        if self.cpuacct is None:
            return None
        if self.version == "cgroup-v2":
            usec = _read_counter(self.cpuacct / "cpu.stat", "usage_usec")
            return usec * 1000
        try:
            return int((self.cpuacct / "cpuacct.usage").read_text().strip())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """How many processes of this cgroup the OOM killer killed."""
        name = "memory.events" if self.version == "cgroup-v2" else "memory.oom_control"
        return _read_counter(self.memory / name, "oom_kill")

    def signal_all(self, sig: int) -> int:
        sent = 0
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                sent += 1
        return sent

    def kill_now(self) -> None:
        """One round of SIGKILL to every member: cgroup.kill (v2), else frozen first so that none forks in
        between (a member forked after the list was read would be missed until the next round)."""
        if self.version == "cgroup-v2" and (self.dirs[0] / "cgroup.kill").exists():
            with contextlib.suppress(FileNotFoundError):
                (self.dirs[0] / "cgroup.kill").write_text("1")
                return
        frozen = self._freeze(True)
        try:
            self.signal_all(signal.SIGKILL)
        finally:
            if frozen:
                self._freeze(False)

    def _freeze(self, frozen: bool) -> bool:
        if self.freezer is None:
            return False
        if self.version == "cgroup-v2":
            control, value = self.freezer / "cgroup.freeze", "1" if frozen else "0"
        else:
            control, value = self.freezer / "freezer.state", "FROZEN" if frozen else "THAWED"
        try:
            control.write_text(value)
        except OSError:
            return False
        return True

    async def wait_empty(self, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        interval = 0.005
        while self.pids():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(interval, remaining))
            interval = min(interval * 2, 0.1)
        return True

    async def stop(self, grace_s: float) -> bool:
        """SIGTERM to every process; SIGKILL to what is left once empty or after `grace_s`; then removed.
        True once gone (False: a process would not die, see KILL_TIMEOUT_S)."""
        if self.signal_all(signal.SIGTERM):
            await self.wait_empty(grace_s)
        return await self.kill()

    async def kill(self, timeout_s: float = KILL_TIMEOUT_S) -> bool:
        """SIGKILL until empty, then remove the cgroup. True once gone."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        interval = 0.002
        while self.pids():
            if loop.time() > deadline:
                log.error("processes of a cgroup would not die", extra={"data": {
                    "cgroup": str(self.dirs[0]), "pids": sorted(self.pids())}})
                return False
            self.kill_now()
            await asyncio.sleep(interval)
            interval = min(interval * 2, 0.05)
        return self.remove()

    def kill_blocking(self, timeout_s: float = KILL_TIMEOUT_S) -> bool:
        """`kill` for a caller without an event loop (a launcher cleaning up after a rep it stopped for
        good); the rep itself never blocks its loop on it."""
        deadline = time.monotonic() + timeout_s
        while self.pids():
            if time.monotonic() > deadline:
                return False
            self.kill_now()
            time.sleep(0.01)
        return self.remove()

    def remove(self) -> bool:
        gone = True
        for path in self.dirs:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                gone = False
                log.warning(
                    "cannot remove a cgroup", extra={"data": {"cgroup": str(path), "error": exc.strerror}}
                )
        return gone
