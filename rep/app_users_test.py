"""Per-instance uids: distinct within a process, exclusive across processes (a lock file), none an
account's."""

from __future__ import annotations

import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from .app_users import AppUser, AppUsers, NoAppUser, parse_uid_range

pytestmark = pytest.mark.timeout(60)


def test_a_range_is_lo_dash_hi() -> None:
    assert parse_uid_range("100000-165535") == (100000, 165535)
    for bad in ("100000", "0-5", "9-3", "a-b", "1-4294967295"):
        with pytest.raises(ValueError, match="expected"):
            parse_uid_range(bad)


def test_uids_are_distinct_round_robin_and_come_back(tmp_path: Path) -> None:
    users = AppUsers(200000, 200002, tmp_path / "run" / "uids.lock")
    first = [users.acquire() for _ in range(3)]
    assert first == [AppUser(200000, 200000), AppUser(200001, 200001), AppUser(200002, 200002)]
    with pytest.raises(NoAppUser, match="every uid of 200000-200002 is in use"):
        users.acquire()
    users.release(first[1])
    assert users.acquire() == first[1]
    assert users.held() == {200000, 200001, 200002}
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o700


def test_a_released_uid_is_the_last_handed_out_again(tmp_path: Path) -> None:
    users = AppUsers(200000, 200009, tmp_path / "uids.lock")
    a = users.acquire()
    users.release(a)
    assert users.acquire().uid == 200001


def test_two_allocators_of_one_process_share_what_is_held(tmp_path: Path) -> None:
    lock = tmp_path / "uids.lock"
    one, other = AppUsers(200000, 200001, lock), AppUsers(200000, 200005, lock)
    assert one.acquire().uid == 200000
    assert other.acquire().uid == 200001, "POSIX locks do not exclude within a process: the set does"


HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, int(sys.argv[2]), os.SEEK_SET)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_uid_another_process_holds_is_skipped_until_it_dies(tmp_path: Path) -> None:
    lock = tmp_path / "uids.lock"
    users = AppUsers(200000, 200001, lock)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), "200000"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        assert users.acquire().uid == 200001
        with pytest.raises(NoAppUser):
            users.acquire()
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert users.acquire().uid == 200000, "the kernel dropped the dead holder's lock"


def test_uids_of_accounts_are_never_handed_out(tmp_path: Path) -> None:
    account = max(e.pw_uid for e in pwd.getpwall())
    users = AppUsers(account, account + 1, tmp_path / "uids.lock")
    assert users.acquire().uid == account + 1
