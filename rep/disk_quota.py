"""`disk_mb` enforced by the filesystem: each isolated instance's directory is the mount point of an ext4
filesystem of its own, on a sparse image file mounted through a loop device.

Garden's grootfs enforces disk limits with XFS project quotas; a kernel built without XFS quota support
(this project's test machines) cannot, and mkfs.xfs refuses anything under 300 MB, so a per-instance XFS
file would cost far more than the instance's own limit. ext4 on a loop device needs only the loop driver,
which every kernel a rep runs on has, and costs ~20 ms a start and ~50 ms a stop (docs/isolation.md).

- **The image.** `<data-dir>/disks/<cell_id>/<guid>.img`, root's (the data dir is 0700), sparse: the host's
  blocks are spent only as the instance writes. Sized so that the free space of the fresh filesystem is at
  least disk_mb (`image_bytes`): no journal, no blocks reserved for root, no room kept for resizing, an
  inode per 16 KiB; its root directory owned by the instance's uid from mkfs on (`root_owner`). What it
  has beyond disk_mb is taken by a file in lost+found (root's, 0700), allocated and not written: the
  instance has exactly disk_mb, and its own files' metadata counts against it, as `du` counts it.
- **The mount.** On the instance's directory, `nosuid,nodev`, before the app starts. A write past the
  filesystem's end fails with ENOSPC: the instance keeps running, its neighbours' filesystems are their own.
- **The end.** Unmounted when the instance is removed (the loop device goes with it: `mount -o loop`
  marks it autoclear), then the image deleted. A crashed instance's logs are moved out first and kept in
  the bare directory, as without a filesystem of its own.
- **After a crash of the rep.** What a `kill -9`ed rep left mounted under its instances' directory is
  unmounted at its next start (lazily where something still holds it), loop devices still bound to its
  images detached, and the images deleted.

`probe` decides at the rep's start whether the host allows it (root, mkfs.ext4, mount, and a real trial
mount of a small image); where it does not, the rep measures the directories instead (rep/disk_usage.py)
and its cells say so (`vendue cells`, ISOLATION: `disk:poll`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rep.disk")

MIB = 1024 * 1024
DISKS = "disks"  # under the rep's data dir
IMAGE_SUFFIX = ".img"
NAME = "ext4"  # as the cells advertise it: disk:ext4
POLL_NAME = "poll"
# The fresh filesystem's metadata (inode tables at 256 bytes per 16 KiB, bitmaps, group descriptors, the
# root directory) takes 1.7-3.7 % of the image, 5.3 % of a 1 MB one: 4 % and a MiB more leave disk_mb free.
OVERHEAD_FRACTION = 0.04
OVERHEAD_BYTES = MIB
MKFS_OPTIONS = ("-q", "-F", "-O", "^has_journal,^resize_inode", "-m", "0", "-i", "16384")
# noinit_itable: the kernel would otherwise zero the lazily made inode tables in the background, writing
# 1.6 % of the image to the host for a filesystem that is thrown away.
MOUNT_OPTIONS = "loop,nosuid,nodev,noatime,noinit_itable"
COMMAND_TIMEOUT_S = 60.0
PROBE_MB = 2
LOST_FOUND = "lost+found"  # made by mkfs, root's and 0700
PADDING = "margin"


class DiskQuotaError(OSError):
    """A filesystem of the instance's own could not be made, mounted or removed (one line: what, why)."""


def image_bytes(disk_mb: int) -> int:
    """The image's size: its fresh filesystem has at least `disk_mb` MiB free (a multiple of 4 KiB)."""
    wanted = disk_mb * MIB * (1 + OVERHEAD_FRACTION) + OVERHEAD_BYTES
    return math.ceil(wanted / 4096) * 4096


def _pad(directory: Path, disk_mb: int) -> None:
    """Take what the image offers beyond disk_mb (its margin for metadata) with a file the instance can
    neither read nor remove (in lost+found: root's, 0700): it gets ENOSPC at disk_mb, not a MB later.
    Allocated, not written: the image stays sparse."""
    fs = os.statvfs(directory)
    spare = fs.f_bavail * fs.f_frsize - disk_mb * MIB
    if spare <= 0:
        return
    fd = os.open(directory / LOST_FOUND / PADDING, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.posix_fallocate(fd, 0, spare)
    finally:
        os.close(fd)


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise DiskQuotaError(f"{Path(argv[0]).name}: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise DiskQuotaError(f"{Path(argv[0]).name} exited {done.returncode}: {said[-1] if said else ''}")


def _unescape(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline and backslash octal-escaped)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts_under(root: Path, mountinfo: str | None = None) -> list[Path]:
    """The mount points strictly below `root` (resolved), deepest first: the order to unmount them in."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    base = os.path.realpath(root)
    found = []
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) > 4:
            point = _unescape(fields[4])
            if point.startswith(base + "/"):
                found.append(Path(point))
    return sorted(set(found), key=lambda p: (-len(p.parts), str(p)))


@dataclass(frozen=True, slots=True)
class LoopDisks:
    """Per-instance ext4 filesystems on loop-mounted images, for every cell of one rep."""

    images_root: Path  # <data-dir>/disks
    mkfs: str
    mount: str
    umount: str
    losetup: str | None  # detaches what a crashed rep left bound; without it, autoclear alone

    name = NAME

    def images_dir(self, cell_id: str) -> Path:
        return self.images_root / cell_id

    def image_of(self, cell_id: str, guid: str) -> Path:
        return self.images_dir(cell_id) / f"{guid}{IMAGE_SUFFIX}"

    def attach(self, image: Path, directory: Path, disk_mb: int, uid: int, gid: int) -> None:
        """Make `image` (a filesystem with `disk_mb` free, its root owned by uid:gid) and mount it on
        `directory` (which exists). On failure nothing is left mounted and the image is gone."""
        image.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            with open(image, "wb") as f:  # sparse: the host's blocks are spent as the instance writes
                f.truncate(image_bytes(disk_mb))
            _run([self.mkfs, *MKFS_OPTIONS, "-E", f"root_owner={uid}:{gid},nodiscard", str(image)])
            _run([self.mount, "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(directory)])
        except BaseException:
            with contextlib.suppress(OSError):
                image.unlink()
            raise
        try:
            _pad(directory, disk_mb)
        except BaseException:
            self.detach(image, directory)
            raise

    def detach(self, image: Path, directory: Path) -> None:
        """Unmount `directory` (lazily where something still holds it) and delete `image`."""
        try:
            _run([self.umount, str(directory)])
        except DiskQuotaError as exc:
            log.warning("unmounting an instance's filesystem lazily", extra={"data": {
                "dir": str(directory), "error": str(exc)}})
            _run([self.umount, "-l", str(directory)])
        finally:
            with contextlib.suppress(OSError):
                image.unlink()


def sweep_loop_disks(under: Path, images: Path) -> list[str]:
    """What a previous run of a rep left: every mount below `under` (its instances' directories)
    unmounted (lazily where something still holds it), loop devices still bound to the images in `images`
    detached, the images deleted. Returns what it found. For the rep's start and close, and for whoever
    stops a rep for good (rep/isolation.py sweep_rep)."""
    umount, losetup = shutil.which("umount"), shutil.which("losetup")
    found: list[str] = []
    for point in mounts_under(under):
        found.append(str(point))
        if umount is None:
            continue
        try:
            _run([umount, str(point)])
        except DiskQuotaError:
            with contextlib.suppress(DiskQuotaError):
                _run([umount, "-l", str(point)])
    if images.is_dir():
        for image in sorted(images.rglob(f"*{IMAGE_SUFFIX}")):
            found.append(str(image))
            if losetup is not None:
                _detach_loops(losetup, image)
        shutil.rmtree(images, ignore_errors=True)
    return found


def _detach_loops(losetup: str, image: Path) -> None:
    """Detach every loop device still bound to `image` (one a crashed mount left without autoclear)."""
    try:
        listed = subprocess.run([losetup, "-j", str(image)], capture_output=True, text=True,
                                timeout=COMMAND_TIMEOUT_S, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return
    for line in listed.splitlines():
        device = line.split(":", 1)[0]
        if device.startswith("/dev/loop"):
            with contextlib.suppress(DiskQuotaError):
                _run([losetup, "-d", device])


def probe(data_dir: Path) -> tuple[LoopDisks | None, str]:
    """What this host offers: LoopDisks where root may make and loop-mount an ext4 image (tried for
    real, once, in `<data-dir>/disks`), else None and why (the rep then measures: rep/disk_usage.py)."""
    if os.geteuid() != 0:
        return None, f"loop mounts need root (uid {os.geteuid()})"
    tools = {name: shutil.which(name) for name in ("mkfs.ext4", "mount", "umount")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        return None, f"no {', '.join(missing)} on PATH"
    disks = LoopDisks(Path(data_dir) / DISKS, mkfs=str(tools["mkfs.ext4"]), mount=str(tools["mount"]),
                      umount=str(tools["umount"]), losetup=shutil.which("losetup"))
    trial = disks.images_root / ".probe"
    image, point = trial / f"probe{IMAGE_SUFFIX}", trial / "mnt"
    try:
        for left in mounts_under(trial):  # a probe of a rep killed in the middle of it
            _run([disks.umount, "-l", str(left)])
        shutil.rmtree(trial, ignore_errors=True)
        point.mkdir(mode=0o700, parents=True)
        disks.attach(image, point, PROBE_MB, 0, 0)
        try:
            free = os.statvfs(point)
            offered = free.f_bavail * free.f_frsize
            if offered < PROBE_MB * MIB:
                return None, f"a trial ext4 image offered {offered} bytes of {PROBE_MB} MB"
        finally:
            disks.detach(image, point)
    except OSError as exc:
        return None, f"a trial loop mount failed: {exc}"
    finally:
        shutil.rmtree(trial, ignore_errors=True)
    return disks, ""
