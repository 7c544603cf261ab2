"""Disk usage of a tree (checked against `du`) and the watcher that enforces disk_mb."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.polling import eventually

from .disk_usage import MIB, DiskWatcher, quota_reason, tree_bytes

pytestmark = pytest.mark.timeout(60)

DEADLINE_S = 30.0


def du_bytes(path: Path) -> int:
    """GNU du's answer: disk usage in bytes, hard links once, one filesystem, symlinks not followed."""
    out = subprocess.run(["du", "-s", "-B1", "-x", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def write(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))  # random: no filesystem compresses or dedupes it away
    return path


def test_usage_is_what_du_says_of_a_tree_of_files_and_directories(tmp_path: Path) -> None:
    write(tmp_path / "a" / "b" / "c" / "deep", 300_000)
    write(tmp_path / "a" / "one", 1)
    write(tmp_path / "big", 2 * MIB)
    (tmp_path / "empty-dir").mkdir()
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(100 * MIB)  # occupies (almost) nothing
    used = tree_bytes(tmp_path)
    assert used == du_bytes(tmp_path)
    assert 2 * MIB + 300_000 <= used < 3 * MIB


def test_hard_links_count_once(tmp_path: Path) -> None:
    original = write(tmp_path / "data" / "original", MIB)
    before = tree_bytes(tmp_path)
    os.link(original, tmp_path / "data" / "again")
    os.link(original, tmp_path / "elsewhere")
    assert tree_bytes(tmp_path) == before == du_bytes(tmp_path)


def test_symlinks_are_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside / "big", 4 * MIB)
    tree = tmp_path / "tree"
    write(tree / "small", 1000)
    before = tree_bytes(tree)
    (tree / "to-file").symlink_to(outside / "big")
    (tree / "to-dir").symlink_to(outside)
    (tree / "loop").symlink_to(tree)
    after = tree_bytes(tree)
    assert after == du_bytes(tree)
    assert after - before < 64 * 1024, f"expected only the links themselves counted, grew by {after - before}"


def test_a_missing_tree_uses_nothing_and_a_file_is_its_own_size(tmp_path: Path) -> None:
    assert tree_bytes(tmp_path / "gone") == 0
    file = write(tmp_path / "file", MIB)
    assert tree_bytes(file) == os.lstat(file).st_blocks * 512 >= MIB


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_other_filesystems_are_not_entered(tmp_path: Path) -> None:
    """A tmpfs mounted inside the tree, in a mount namespace of its own (gone when the command ends)."""
    write(tmp_path / "here", MIB)
    mount = tmp_path / "mnt"
    mount.mkdir()
    measure = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r}); "
        f"from rep.disk_usage import tree_bytes; "
        f"print(tree_bytes(__import__('pathlib').Path({str(tmp_path)!r})))"
    )
    script = (f"mount -t tmpfs -o size=16m tmpfs {mount} && head -c 8388608 /dev/urandom > {mount}/big && "
              f"{sys.executable} -c \"{measure}\" && du -s -B1 -x {tmp_path}")
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, timeout=DEADLINE_S)
    assert out.returncode == 0, out.stderr
    measured, du = out.stdout.split()[:2]
    assert int(measured) == int(du) < 2 * MIB, "the tmpfs's 8 MB are not counted (nor is its root)"


def test_the_reason_never_reads_as_within_the_limit() -> None:
    assert quota_reason(128 * MIB + 1, 128) == "disk quota exceeded (129 MB used of 128 MB)"
    assert quota_reason(300 * MIB, 128) == "disk quota exceeded (300 MB used of 128 MB)"


class Verdicts:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def on(self, key: str) -> object:
        return lambda reason: self.seen.append((key, reason))


async def test_a_round_reports_each_directory_over_its_limit_once(tmp_path: Path) -> None:
    sizes = {"over": 3 * MIB, "under": MIB, "forgotten": 9 * MIB}
    watcher = DiskWatcher(60.0, measure=lambda path: sizes[path.name])
    verdicts = Verdicts()
    for key in sizes:
        watcher.watch(key, tmp_path / key, 2, verdicts.on(key))
    watcher.unwatch("forgotten")

    await watcher.check_all()
    await watcher.check_all()

    assert verdicts.seen == [("over", "disk quota exceeded (3 MB used of 2 MB)")]
    assert await watcher.check("under") == "" and await watcher.check("over") == ""  # no longer watched
    sizes["under"] = 5 * MIB
    assert await watcher.check("under") == "disk quota exceeded (5 MB used of 2 MB)"
    assert len(verdicts.seen) == 1, "check() answers; only a round calls back"


async def test_the_watcher_measures_periodically_until_stopped(tmp_path: Path) -> None:
    rounds: list[int] = []

    def measure(path: Path) -> int:
        rounds.append(used := tree_bytes(path))
        return used

    watcher = DiskWatcher(0.05, measure=measure)
    verdicts = Verdicts()
    watcher.watch("inst", tmp_path, 1, verdicts.on("inst"))
    watcher.start()
    try:
        await eventually(lambda: len(rounds) >= 3, DEADLINE_S, "three rounds")
        assert verdicts.seen == [], "within its limit: no verdict"
        write(tmp_path / "fill", 2 * MIB)
        await eventually(lambda: verdicts.seen, DEADLINE_S, "a verdict once the directory holds 2 MB")
        [(key, reason)] = verdicts.seen
        assert key == "inst" and reason.startswith("disk quota exceeded (") and reason.endswith(" of 1 MB)")
    finally:
        await watcher.stop()
    measured = len(rounds)
    watcher.watch("again", tmp_path, 1, verdicts.on("again"))
    await asyncio.sleep(0.2)  # several periods: a stopped watcher must not have measured (nothing to poll)
    assert len(rounds) == measured
