"""Unprivileged users for instances: one uid per running instance (gid = uid, no supplementary groups),
from a range no account or group uses, as Garden maps each container's user (`--app-uid-range`).

Allocation is machine-wide, so that two reps never hand out the same uid at once: one lock file,
/run/vendue/app-uids.lock (its directory 0700), with one POSIX byte-range lock per uid in use (the byte at
offset uid, taken with fcntl.lockf without waiting: the uid itself rather than uid - LO, so that reps with
different ranges still exclude each other), held while the instance lives and released by the kernel when
the rep dies. POSIX locks never conflict within one process, so the process also keeps the uids it holds
in one set per lock file, shared by all its allocators (a multi-cell rep has several executors). Closing
ANY descriptor of that file drops every lock the process holds on it: it is opened once per process and
never closed.

What remains: a process of an instance that escaped a rep that died (a grandchild, which PR_SET_PDEATHSIG
does not reach, still in the instance's cgroup) runs on under its uid, now unlocked, until that rep starts
again and kills what is left in its cgroups; meanwhile another rep may give that uid to a new instance,
which could then signal or trace the stray.
"""

from __future__ import annotations

import fcntl
import grp
import os
import pwd
import threading
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = Path("/run/vendue/app-uids.lock")
DEFAULT_RANGE = "100000-165535"


class NoAppUser(RuntimeError):
    """Every uid of the range is in use (by this rep or another on the machine)."""


@dataclass(frozen=True, slots=True)
class AppUser:
    uid: int
    gid: int


def parse_uid_range(text: str) -> tuple[int, int]:
    """`LO-HI` -> (LO, HI); ValueError with a reason."""
    lo_text, sep, hi_text = text.partition("-")
    if not sep or not lo_text.strip().isdigit() or not hi_text.strip().isdigit():
        raise ValueError(f"expected LO-HI (e.g. {DEFAULT_RANGE}), got {text!r}")
    lo, hi = int(lo_text), int(hi_text)
    if lo < 1 or hi < lo or hi >= 2**32 - 1:
        raise ValueError(f"expected 1 <= LO <= HI < 4294967295, got {text!r}")
    return lo, hi


class _LockFile:
    """The process's one descriptor of a lock file, and the uids it holds through it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.held: set[int] = set()
        self.lock = threading.Lock()

    def try_take(self, uid: int) -> bool:
        if uid in self.held:
            return False
        try:
            fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, uid, os.SEEK_SET)
        except OSError:  # EAGAIN/EACCES: another process holds it
            return False
        self.held.add(uid)
        return True

    def give_back(self, uid: int) -> None:
        if uid in self.held:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, uid, os.SEEK_SET)
            self.held.discard(uid)


_lock_files: dict[Path, _LockFile] = {}
_lock_files_lock = threading.Lock()


def _lock_file(path: Path) -> _LockFile:
    with _lock_files_lock:
        if path not in _lock_files:
            _lock_files[path] = _LockFile(path)
        return _lock_files[path]


class AppUsers:
    """Hands out the uids of LO..HI (see the module's docstring)."""

    def __init__(self, lo: int, hi: int, lock_file: Path = LOCK_FILE) -> None:
        self.lo, self.hi = lo, hi
        self._file = _lock_file(lock_file)
        # Uids (or gids) an account or a group has: an app must never share its files or its rights.
        self._taken_by_accounts = {e.pw_uid for e in pwd.getpwall() if lo <= e.pw_uid <= hi} | {
            e.gr_gid for e in grp.getgrall() if lo <= e.gr_gid <= hi}
        self._next = lo  # round robin: a uid just released is the last to be handed out again

    def held(self) -> set[int]:
        """The uids of this range this process holds."""
        return {uid for uid in self._file.held if self.lo <= uid <= self.hi}

    def acquire(self) -> AppUser:
        size = self.hi - self.lo + 1
        with self._file.lock:
            for step in range(size):
                uid = self.lo + (self._next - self.lo + step) % size
                if uid not in self._taken_by_accounts and self._file.try_take(uid):
                    self._next = uid + 1 if uid < self.hi else self.lo
                    return AppUser(uid, uid)
        raise NoAppUser(f"every uid of {self.lo}-{self.hi} is in use")

    def release(self, user: AppUser) -> None:
        with self._file.lock:
            self._file.give_back(user.uid)
