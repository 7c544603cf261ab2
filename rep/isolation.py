"""How the process executor isolates instances: `--isolation cgroups` (the default) or `none`.

With `cgroups` every instance gets, as a Garden container would:
- its own unprivileged uid and gid (rep/app_users.py, `--app-uid-range`, no supplementary groups);
- its own cgroup (rep/cgroups.py): memory = memory_mb with swap included, pids.max = `--pids-limit`, CPU
  shares proportional to memory; stop kills everything in it;
- its own directory, 0700 and owned by its uid, with `tmp/` inside (HOME and TMPDIR), under
  `--instances-dir` (default /var/lib/vendue/instances) + /<rep-key>/<cell_id>/, levels made 0711 and
  root-owned: an app user can reach its own directory whatever the permissions of the rep's data dir,
  which the rep makes 0700 (its certificate's key, the fencing token: no app reads them);
- where the host allows loop mounts (probed at start, `--disk-quota auto`), a filesystem of its own on
  that directory, of disk_mb (rep/disk_quota.py): writes past it fail with ENOSPC. Elsewhere (and with
  `--disk-quota poll`) its directory is measured against disk_mb (rep/disk_usage.py). The cells say which:
  `cgroup-v2 disk:ext4` or `cgroup-v2 disk:poll`.
It needs root (euid 0) and the memory, pids and cpu controllers; a rep that has not got them refuses to
start with one line naming what is missing and `--isolation none`.

With `none` an instance runs as the rep's own user, in `<data-dir>/<cell_id>/containers/<guid>`, with
RLIMIT_DATA = memory_mb as its only limit (`--no-memory-limit` drops even that): the rep says so in a
warning at start and in its cells' presence (`isolation`: "none", shown by `vendue cells`).

<rep-key> is the first 12 hex digits of the sha256 of the rep's resolved data dir: several reps on one
machine (and several test clusters, each with its `cell-0`) never share a cgroup or a directory, and a
rep restarted on the same data dir finds what its previous run left.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from common.procutil import child_preexec, unreachable_by_others

from .app_users import AppUser, AppUsers, parse_uid_range
from .cgroups import Cgroups, CgroupsUnavailable, InstanceCgroup, detect
from .disk_quota import DISKS, IMAGE_SUFFIX, POLL_NAME, LoopDisks, mounts_under, probe, sweep_loop_disks
from .settings import RepSettings

log = logging.getLogger("rep.isolation")

DEFAULT_INSTANCES_DIR = Path("/var/lib/vendue/instances")
NONE_HINT = "pass --isolation none to run apps as the rep's own user, unisolated"
NONE_WARNING = ("isolation none: every app runs as the rep's own user with no limit but RLIMIT_DATA, and can "
                "read and write what the rep can (its data dir, its environment)")
TMP = "tmp"


class IsolationError(ValueError):
    """The rep cannot isolate instances as asked (one line: what is missing, and the flag)."""


def rep_key(data_dir: Path) -> str:
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Isolation:
    """How a rep process isolates its instances (`--isolation cgroups`): shared by its cells."""

    cgroups: Cgroups
    users: AppUsers
    instances_root: Path  # <instances-dir>/<rep-key>
    pids_limit: int
    disks: LoopDisks | None = None  # disk_mb a filesystem of the instance's own; None: measured (the poll)

    @property
    def name(self) -> str:
        """As advertised in the cells' presence: cgroup-v1 or cgroup-v2, then how disk_mb is enforced
        (`disk:ext4`, a filesystem each; `disk:poll`, measured), e.g. `cgroup-v2 disk:ext4`."""
        return f"{self.cgroups.version} disk:{self.disks.name if self.disks is not None else POLL_NAME}"

    def instances_dir(self, cell_id: str) -> Path:
        return self.instances_root / cell_id

    def open_cell(self, cell_id: str) -> None:
        """Make the cell's cgroups and its instances' directory (0711, root's): raises IsolationError."""
        try:
            self.cgroups.cell(cell_id).open()
        except CgroupsUnavailable as exc:
            raise IsolationError(f"cannot isolate instances: {exc}; {NONE_HINT}") from None
        make_reachable_dir(self.instances_dir(cell_id))


@dataclass(slots=True)
class Sandbox:
    """What one instance runs in: its directory, and (isolated) its user and cgroup."""

    directory: Path
    user: AppUser | None = None
    cgroup: InstanceCgroup | None = None
    disk_image: Path | None = None  # the image of the filesystem mounted on `directory` (rep/disk_quota.py)
    under_fd: int = -1  # with disk_image: the mount point's own directory, beneath the filesystem
    data_limit_bytes: int | None = None  # RLIMIT_DATA, where no cgroup limits memory

    def preexec(self) -> Callable[[], None]:
        """The child's preexec_fn (common/procutil.child_preexec)."""
        return child_preexec(
            data_limit_bytes=self.data_limit_bytes,
            cgroup_procs=self.cgroup.procs_files if self.cgroup is not None else (),
            uid=self.user.uid if self.user is not None else None,
            gid=self.user.gid if self.user is not None else None,
        )


def make_reachable_dir(directory: Path) -> None:
    """A cell's instances' directory, <instances-dir>/<rep-key>/<cell>: the two levels the rep owns 0711 and
    root's (every user may pass through, nobody but root may list or write); <instances-dir> made 0711 if
    missing, else left as the operator made it (isolation_problem checked that everyone may pass it)."""
    directory.parent.parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    for level in (directory.parent, directory):
        level.mkdir(mode=0o711, exist_ok=True)
        os.chown(level, 0, 0)
        level.chmod(0o711)


def make_instance_dir(directory: Path, user: AppUser | None) -> None:
    """An instance's directory and its tmp/: 0700, owned by the instance's user when it has one."""
    try:
        directory.mkdir(mode=0o700)
    except FileExistsError:  # a guid is never reused; what is there is a previous run's: start afresh
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=0o700)
    (directory / TMP).mkdir(mode=0o700)
    if user is not None:
        os.chown(directory, user.uid, user.gid)
        os.chown(directory / TMP, user.uid, user.gid)


def disown_instance_dir(directory: Path) -> None:
    """A crashed instance's directory, kept for its log: root's and 0700 from now on, so that the next
    holder of its uid cannot enter it."""
    try:
        os.chown(directory, 0, 0, follow_symlinks=False)
        directory.chmod(0o700)
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)


def sweep_rep(data_dir: Path, instances_dir: Path = DEFAULT_INSTANCES_DIR) -> None:
    """Remove what an isolating rep on `data_dir` left: what its next start would (rep/process_executor.py
    open), for whoever stops a rep for good, maybe killed (a launcher, a test): every process still in its
    cells' cgroups killed, the cgroups and its instances' directories removed. Never while it runs."""
    if os.geteuid() != 0:
        return
    key = rep_key(data_dir)
    from .container_executor import sweep_containers  # a container rep's runc state, overlays, networks

    sweep_containers(data_dir)
    with contextlib.suppress(CgroupsUnavailable):
        cgroups = detect(key)
        for cell_id in cgroups.cell_ids():
            cell = cgroups.cell(cell_id)
            for cgroup in cell.leftovers():
                cgroup.kill_blocking()
            cell.remove()
        cgroups.remove_rep_levels()
    sweep_loop_disks(Path(instances_dir) / key, Path(data_dir) / DISKS)
    shutil.rmtree(Path(instances_dir) / key, ignore_errors=True)


def isolation_leftovers(data_dir: Path, instances_dir: Path = DEFAULT_INSTANCES_DIR) -> list[str]:
    """What an isolating rep on `data_dir` left behind (empty after a clean stop or `sweep_rep`): its
    cells' cgroups, the level of its own key in each hierarchy, its instances' directories, the
    filesystems mounted on them and their images."""
    key = rep_key(data_dir)
    left: list[str] = []
    with contextlib.suppress(CgroupsUnavailable):
        left += [str(h.base) for h in detect(key).hierarchies if h.base.exists()]
    if (Path(instances_dir) / key).exists():
        left.append(str(Path(instances_dir) / key))
        left += [str(point) for point in mounts_under(Path(instances_dir) / key)]
    left += [str(image) for image in sorted((Path(data_dir) / DISKS).glob(f"*/*{IMAGE_SUFFIX}"))]
    return left


def instances_dir_of(settings: RepSettings) -> Path:
    return Path(settings.instances_dir or DEFAULT_INSTANCES_DIR)


def isolation_problem(settings: RepSettings) -> str | None:
    """Why this rep cannot isolate as its settings ask (one line naming what and `--isolation none`); None
    when it can, or need not. Reads only: nothing is made (`prepare_isolation` makes the rest)."""
    if settings.executor == "container":
        from .container_executor import container_problem  # the container executor's own needs first

        problem = container_problem(settings.cni_path, settings.container_init)
        if problem is not None:
            return problem
        if settings.isolation == "none":
            return "--executor container: needs --isolation cgroups (each container's user and cgroup)"
    elif settings.executor != "process" or settings.isolation == "none":
        return None
    if os.geteuid() != 0:
        return (
            f"cannot isolate instances: not running as root (uid {os.geteuid()}); run as root, or {NONE_HINT}"
        )
    try:
        detect(rep_key(settings.data_dir), fs_root=settings.cgroup_fs, parent=settings.cgroup_parent)
    except CgroupsUnavailable as exc:
        return (
            f"cannot isolate instances: {exc}; give the rep cgroup v2 with memory, pids and cpu delegated "
            f"or cgroup v1 memory, pids and cpu hierarchies, or {NONE_HINT}"
        )
    instances = instances_dir_of(settings)
    existing = next(p for p in (instances, *instances.parents) if p.exists())
    blocked = unreachable_by_others(existing)
    if blocked is not None:
        return (
            f"instances_dir: {instances} is out of reach of the apps' users ({blocked} is mode "
            f"{blocked.stat().st_mode & 0o777:o}); give --instances-dir a directory every user may traverse"
        )
    return None


def prepare_isolation(settings: RepSettings) -> Isolation | None:
    """The rep's isolation (None with `--isolation none` or the sim executor); IsolationError when it
    cannot. Makes the rep's data dir 0700 and the instances' root."""
    problem = isolation_problem(settings)
    if problem is not None:
        raise IsolationError(problem)
    if settings.executor == "sim" or settings.isolation == "none":
        return None
    key = rep_key(settings.data_dir)
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    settings.data_dir.chmod(0o700)
    cgroups = detect(key, fs_root=settings.cgroup_fs, parent=settings.cgroup_parent)
    lo, hi = parse_uid_range(settings.app_uid_range)
    disks: LoopDisks | None = None
    if settings.disk_quota == "auto":
        disks, why = probe(settings.data_dir)
        if disks is None:
            log.warning("disk_mb measured every --disk-check-interval, not enforced by a filesystem",
                        extra={"data": {"reason": why}})
    return Isolation(cgroups, AppUsers(lo, hi), instances_dir_of(settings) / key, settings.pids_limit, disks)

