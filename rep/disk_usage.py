"""`disk_mb` enforced: what an instance's directory uses on disk, measured by one watcher per executor.

`tree_bytes` counts what `du` would: st_blocks * 512 of every inode in the tree once (hard links once),
symlinks not followed, other filesystems not entered. The tree belongs to the app's user, who may swap a
directory for a symlink while it is walked: every directory is opened relative to its parent's
descriptor with O_NOFOLLOW, so the walk never leaves the tree.

`DiskWatcher` measures every watched directory each `interval_s` seconds, all of them in one worker
thread per round (the event loop only collects the numbers); a directory over its limit is reported once
through its callback, with the reason the instance is crashed with. The executor also asks it on exit
(`check`), so an instance that fills its quota between two rounds and exits is caught too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rep.disk")

MIB = 1024 * 1024
BLOCK_BYTES = 512  # the unit of st_blocks, whatever the filesystem's block size
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def tree_bytes(root: Path) -> int:
    """Bytes the tree at `root` occupies on its filesystem (0 when it does not exist). What vanishes or
    cannot be read while it is walked is not counted."""
    try:
        top = os.lstat(root)
    except FileNotFoundError:
        return 0
    total = top.st_blocks * BLOCK_BYTES
    if not stat.S_ISDIR(top.st_mode):
        return total
    linked: set[int] = set()  # inodes with several links already counted (one filesystem: st_ino is enough)
    try:
        pending = [os.open(root, _DIR_FLAGS)]
    except OSError:
        return total
    while pending:
        fd = pending.pop()
        try:
            subdirs: list[str] = []
            with contextlib.suppress(OSError), os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if st.st_dev != top.st_dev:
                        continue  # a mount point: another filesystem's business
                    if stat.S_ISDIR(st.st_mode):
                        subdirs.append(entry.name)
                    elif st.st_nlink > 1:
                        if st.st_ino in linked:
                            continue
                        linked.add(st.st_ino)
                    total += st.st_blocks * BLOCK_BYTES
            for name in subdirs:
                with contextlib.suppress(OSError):
                    pending.append(os.open(name, _DIR_FLAGS, dir_fd=fd))
        finally:
            os.close(fd)
    return total


def quota_reason(used_bytes: int, limit_mb: int) -> str:
    """The crash reason of an instance over its disk_mb (rounded up: over the limit never reads as at it)."""
    return f"disk quota exceeded ({math.ceil(used_bytes / MIB)} MB used of {limit_mb} MB)"


@dataclass(frozen=True, slots=True)
class _Watched:
    directory: Path
    limit_mb: int
    on_over: Callable[[str], None]

    def reason(self, used_bytes: int) -> str:
        return quota_reason(used_bytes, self.limit_mb) if used_bytes > self.limit_mb * MIB else ""


class DiskWatcher:
    """One periodic measurement of every watched instance directory (not one task per instance)."""

    def __init__(self, interval_s: float, measure: Callable[[Path], int] = tree_bytes) -> None:
        self.interval_s = interval_s
        self._measure = measure
        self._watched: dict[str, _Watched] = {}
        self._last: dict[str, int] = {}  # the last measurement of each watched directory (rep/usage.py)
        self._runner: asyncio.Task[None] | None = None

    def watch(self, key: str, directory: Path, limit_mb: int, on_over: Callable[[str], None]) -> None:
        """Measure `directory` every round; once it exceeds `limit_mb`, `on_over(reason)` and no more."""
        self._watched[key] = _Watched(directory, limit_mb, on_over)

    def unwatch(self, key: str) -> None:
        self._watched.pop(key, None)
        self._last.pop(key, None)

    def last_bytes(self, key: str) -> int | None:
        """What `key`'s directory used when last measured (None: not watched, or not measured yet)."""
        return self._last.get(key)

    async def check(self, key: str) -> str:
        """Measured now: the crash reason when `key`'s directory is over its limit, else "" (also when it
        is not watched). The callback is not called."""
        watched = self._watched.get(key)
        if watched is None:
            return ""
        return watched.reason(await asyncio.to_thread(self._measure, watched.directory))

    async def check_all(self) -> None:
        """One round: measure every watched directory; report those over their limit."""
        watched = list(self._watched.items())
        if not watched:
            return
        used = await asyncio.to_thread(lambda: [self._measure(w.directory) for _, w in watched])
        for (key, w), size in zip(watched, used, strict=True):
            if self._watched.get(key) is w:
                self._last[key] = size
            reason = w.reason(size)
            if reason and self._watched.get(key) is w:  # not unwatched (or watched anew) meanwhile
                del self._watched[key]
                w.on_over(reason)

    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="disk-watcher")

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)  # a period, not a synchronisation
            try:
                await self.check_all()
            except Exception:
                log.exception("measuring the instances' disk usage failed")
