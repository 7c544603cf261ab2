"""A host of the multi-host test cluster: a thread living in the host's network namespace, on which every
process of that host is started.

    host = Host("cell-0", "198.18.7.3", Path("/run/netns/vendue-1a2b3c-cell-0"))
    proc = host.run(lambda: subprocess.Popen([...]))    # in the namespace from its first instruction
    host.close()                                         # after its processes are gone

Linux keeps the network namespace per thread and a child inherits its forking thread's: a process started
from the host's thread binds the host's address, and loopback there is the host's own. So whatever starts
processes (LocalCluster's spawn, the embedded PostgreSQL, nats-server) runs unchanged, only on this thread,
with no `ip netns exec` wrapper and no change of user in between (PostgreSQL's own user switch still
works). Nothing but starts runs on it; the tests themselves stay in the root namespace and reach the hosts
over the bridge.

The thread lives until `close()`: children get PR_SET_PDEATHSIG from common/procutil.py, which fires when
the thread that forked them exits, so a host's processes must be gone before it closes.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
CLONE_NEWNET = 0x40000000  # <sched.h>
START_TIMEOUT_S = 120.0  # the longest a start may take on the host's thread (PostgreSQL's initdb among them)

_LIBC = ctypes.CDLL(None, use_errno=True)


def enter_namespace(path: Path) -> None:
    """Move the calling thread into the network namespace mounted at `path` (setns(2))."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _LIBC.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)


class Host:
    def __init__(self, name: str, address: str, namespace: Path) -> None:
        self.name = name
        self.address = address
        self.namespace = namespace
        self._thread = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"host-{name}", initializer=enter_namespace,
            initargs=(namespace,),
        )

    def run(self, call: Callable[[], T], timeout: float = START_TIMEOUT_S) -> T:
        """`call()` on the host's thread (inside its namespace); its result, or what it raised."""
        return self._thread.submit(call).result(timeout=timeout)

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.address})"
