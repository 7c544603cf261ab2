"""Per-instance ext4 filesystems on loop-mounted images (rep/disk_quota.py): real mkfs and mounts as root,
skipped, with the reason, where the host allows none."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .disk_quota import MIB, LoopDisks, image_bytes, mounts_under, probe, sweep_loop_disks

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def disks(tmp_path: Path) -> Iterator[LoopDisks]:
    found, why = probe(tmp_path / "data")
    if found is None:
        pytest.skip(f"this host offers no loop-mounted filesystems: {why}")
    yield found
    sweep_loop_disks(tmp_path, found.images_root)


def test_mounts_under_finds_the_mount_points_below_a_directory_deepest_first() -> None:
    mountinfo = "\n".join([
        "22 1 8:1 / / rw - ext4 /dev/vda rw",
        "30 22 7:0 / /var/lib/vendue/instances/k/c/a rw - ext4 /dev/loop0 rw",
        "31 30 7:1 / /var/lib/vendue/instances/k/c/a/deeper rw - ext4 /dev/loop1 rw",
        "32 22 7:2 / /var/lib/vendue/instances/k/c/with\\040space rw - ext4 /dev/loop2 rw",
        "33 22 7:3 / /var/lib/vendue/instances/k/cc/b rw - ext4 /dev/loop3 rw",
        "34 22 7:4 / /var/lib/vendue/instances/k/c rw - ext4 /dev/loop4 rw",
    ])
    found = mounts_under(Path("/var/lib/vendue/instances/k/c"), mountinfo)
    assert found == [Path("/var/lib/vendue/instances/k/c/a/deeper"), Path("/var/lib/vendue/instances/k/c/a"),
                     Path("/var/lib/vendue/instances/k/c/with space")]


def test_a_host_without_mkfs_offers_no_filesystems_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    found, why = probe(tmp_path / "data")
    assert found is None
    assert why in ("no mkfs.ext4, mount, umount on PATH", f"loop mounts need root (uid {os.geteuid()})"), why


@pytest.mark.parametrize("disk_mb", [1, 7, 64, 300, 4096])
def test_an_instance_filesystem_has_its_disk_mb_free_and_costs_the_host_nothing_upfront(
    disks: LoopDisks, tmp_path: Path, disk_mb: int
) -> None:
    image, point = disks.image_of("cell-q", "inst-1"), tmp_path / "inst-1"
    point.mkdir()
    disks.attach(image, point, disk_mb, 4321, 4322)
    try:
        fs = os.statvfs(point)
        free = fs.f_bavail * fs.f_frsize
        st = point.stat()
        assert free == disk_mb * MIB, f"expected {disk_mb} MB free, saw {free / MIB:.3f} MB"
        assert (st.st_uid, st.st_gid) == (4321, 4322), "the filesystem's root is the instance's"
        assert image.stat().st_size == image_bytes(disk_mb)
        assert image.stat().st_blocks * 512 < max(2 * MIB, image_bytes(disk_mb) // 10), "a sparse image"
    finally:
        disks.detach(image, point)
    assert not os.path.ismount(point) and not image.exists()


def test_a_write_past_the_filesystem_fails_with_enospc(disks: LoopDisks, tmp_path: Path) -> None:
    image, point = disks.image_of("cell-q", "inst-1"), tmp_path / "inst-1"
    point.mkdir()
    disks.attach(image, point, 4, 0, 0)
    written = 0
    try:
        with pytest.raises(OSError) as raised, open(point / "fill", "wb", buffering=0) as f:
            for _ in range(64 * 16):  # 64 KiB at a time: a larger write that does not fit may fail whole
                written += f.write(b"\xff" * (MIB // 16))
        assert raised.value.errno == 28, raised.value  # ENOSPC
        # Its own metadata (an extent block, a directory block) counts against it, as `du` counts it.
        assert 4 * MIB - MIB // 8 <= written <= 4 * MIB, f"expected ENOSPC at 4 MB, saw {written / MIB:.3f}"
    finally:
        disks.detach(image, point)


def test_a_sweep_unmounts_what_a_crashed_rep_left_and_deletes_its_images(
    disks: LoopDisks, tmp_path: Path
) -> None:
    under = tmp_path / "instances"
    points = [under / "cell-q" / guid for guid in ("a", "b")]
    for point in points:
        point.mkdir(parents=True)
        disks.attach(disks.image_of("cell-q", point.name), point, 2, 0, 0)
    (points[0] / "open").write_text("held")
    held = open(points[0] / "open")  # something still holds it: unmounted lazily
    try:
        assert mounts_under(under) == sorted(points)

        found = sweep_loop_disks(under, disks.images_root)

        assert sorted(found) == sorted([*map(str, points), *(str(disks.image_of("cell-q", p.name))
                                                             for p in points)])
        assert mounts_under(under) == [] and not disks.images_root.exists()
    finally:
        held.close()
