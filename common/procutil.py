"""Child-process helpers shared by the rep's process executor, the local launcher and the tests.

- `child_preexec(...)`: a `preexec_fn` that makes a child die with its parent (Linux PR_SET_PDEATHSIG
  = SIGKILL, so even `kill -9` of the parent takes the child down), optionally caps its data segment, and
  for an isolated instance first puts it in its cgroups and drops it to its own user.
- `app_python()`: a Python interpreter an app's unprivileged user may run.
- `free_port()`: a TCP port that was free a moment ago on the given host.
- `run_captured(...)`: run a short command to its end from asyncio, its output captured, spawned off the
  event loop.
- `terminate_then_kill(...)` / `terminate_then_kill_async(...)`: SIGTERM, wait a grace period, SIGKILL;
  optionally to the child's whole process group (children started with `start_new_session=True`).
- `write_ready_file(...)` / `wait_ready_file(...)`: the `--ready-file` handshake between a component
  and whoever started it: one JSON line {"url": ..., "pid": ...} written once the component serves.

PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process. Fork children
from a thread that lives as long as the process (the main thread / the event loop's thread).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio  # imported by the one coroutine here: the CLI reads pids through this module

PR_SET_PDEATHSIG = 1
_IS_LINUX = sys.platform.startswith("linux")


def _libc() -> ctypes.CDLL | None:
    if not _IS_LINUX:
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()  # loaded before any fork: a preexec_fn must not do imports or dlopen


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux; no-op elsewhere)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def child_preexec(
    *,
    die_with_parent: bool = True,
    data_limit_bytes: int | None = None,
    cgroup_procs: Sequence[str] = (),
    uid: int | None = None,
    gid: int | None = None,
) -> Callable[[], None]:
    """A `preexec_fn` for subprocess/asyncio, doing in this order:

    1. join the cgroups (writes "0", itself, to each `cgroup_procs` file): while still root, and before
       anything it runs can fork, so that nothing of it is ever outside;
    2. become `uid`/`gid` with no supplementary groups (subprocess's own user= and group= apply before the
       preexec_fn, too early for step 1);
    3. die with the parent: after the change of uid, which clears PR_SET_PDEATHSIG;
    4. cap RLIMIT_DATA (not RLIMIT_AS: Python and many runtimes reserve far more address space than they
       use, so an address-space cap breaks them while a data-segment cap, heap + private mappings, Linux
       >= 4.7, tracks what a process actually allocates). Not needed where a memory cgroup limits it.

    It runs between fork and exec: nothing here imports or allocates much. A failure raises, and the
    child then never execs.
    """
    parent_pid = os.getpid()
    procs = tuple(os.fsencode(path) for path in cgroup_procs)

    def preexec() -> None:
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        if gid is not None:
            os.setgroups([])
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
        if die_with_parent:
            set_parent_death_signal(signal.SIGKILL)
            # The parent may have died between fork and prctl: then we were reparented already.
            if os.getppid() != parent_pid:
                os._exit(1)
        if data_limit_bytes is not None:
            import resource  # already imported by the parent in practice; cheap if cached

            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_DATA, (data_limit_bytes, data_limit_bytes))

    return preexec


def unreachable_by_others(path: Path) -> Path | None:
    """The first of `path`'s ancestors (then `path` itself) that a user who is neither its owner nor in its
    group cannot traverse (execute); None when every one of them can."""
    resolved = Path(os.path.realpath(path))
    for step in (*reversed(resolved.parents), resolved):
        try:
            if not os.stat(step).st_mode & 0o001:
                return step
        except OSError:
            return step
    return None


def app_python() -> str:
    """A Python interpreter an app's unprivileged user may execute: the first of this interpreter (resolved),
    /usr/bin/python3, /usr/local/bin/python3 that every user can reach and run. This one may live under a
    home directory (e.g. pyenv's under /root, mode 0700), out of an app user's reach."""
    candidates = [os.path.realpath(sys.executable), "/usr/bin/python3", "/usr/local/bin/python3"]
    for candidate in candidates:
        if os.path.isfile(candidate) and unreachable_by_others(Path(candidate)) is None:
            return candidate
    return candidates[0]


LISTEN_PORTS_FROM = 10_000  # free_port's ports: from here up to the kernel's ephemeral range
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# "LOW-HIGH": the ports free_port picks from instead (inherited by the processes it starts: a rep's
# instances' ports too). For a firewall's opening, or for processes sharing a machine that must never
# pick the same port: each test worker gets a share of its own (conftest.py). Without it two workers
# could both pick a port a third cluster's BBS had let go for a moment, to restart on it.
PORT_RANGE_ENV = "VENDUE_PORT_RANGE"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` right now, for a process about to listen on it (racy by nature, but short).

    Taken from VENDUE_PORT_RANGE when set, else below the kernel's ephemeral range when there is one:
    bind-to-0 hands out an ephemeral port, which the kernel also gives every outgoing connection, so a busy
    machine (a test suite starting clusters on two workers) could take it for a connection before the
    listener bound it."""
    ports = listen_ports()
    if ports is not None:
        for port in random.sample(ports, min(50, len(ports))):
            if _bindable(host, port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def listen_ports() -> range | None:
    """The ports free_port picks from: VENDUE_PORT_RANGE's, else from LISTEN_PORTS_FROM up to the
    ephemeral range (None: no such range known, bind-to-0 it is). ValueError for a malformed setting."""
    spec = os.environ.get(PORT_RANGE_ENV, "").strip()
    if spec:
        low, sep, high = spec.partition("-")
        if not (sep and low.strip().isdigit() and high.strip().isdigit()
                and 1 <= int(low) <= int(high) <= 65535):
            raise ValueError(f"{PORT_RANGE_ENV}: expected LOW-HIGH, two ports (1-65535) in order, "
                             f"got {spec!r}")
        return range(int(low), int(high) + 1)
    ephemeral_from = ephemeral_ports_from()
    if ephemeral_from is not None and ephemeral_from - LISTEN_PORTS_FROM > 100:
        return range(LISTEN_PORTS_FROM, ephemeral_from)
    return None


def ephemeral_ports_from() -> int | None:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None  # not Linux, or no /proc: bind-to-0 it is


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists and is not a zombie (exited, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc (not Linux): the signal probe is all we have
    return stat.rpartition(")")[2].split()[0] != "Z"


def signal_process(pid: int, sig: int, *, group: bool = False) -> bool:
    """Send `sig` to a process (or its process group); False when it is already gone."""
    try:
        if group:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def terminate_then_kill(proc: subprocess.Popen[Any], grace_s: float = 10.0, *, group: bool = False) -> int:
    """SIGTERM, wait up to `grace_s`, then SIGKILL; returns the exit code. `group`: whole process group."""
    if proc.poll() is None:
        signal_process(proc.pid, signal.SIGTERM, group=group)
        try:
            return proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            signal_process(proc.pid, signal.SIGKILL, group=group)
    elif group:
        # The leader is gone, but stragglers of its group may remain.
        signal_process(proc.pid, signal.SIGKILL, group=True)
    return proc.wait(timeout=30.0)


async def terminate_then_kill_async(
    proc: asyncio.subprocess.Process, grace_s: float = 10.0, *, group: bool = False
) -> int:
    """The asyncio twin of `terminate_then_kill`."""
    import asyncio

    if proc.returncode is None:
        signal_process(proc.pid, signal.SIGTERM, group=group)
        try:
            return await asyncio.wait_for(proc.wait(), timeout=grace_s)
        except TimeoutError:
            signal_process(proc.pid, signal.SIGKILL, group=group)
    elif group:
        signal_process(proc.pid, signal.SIGKILL, group=True)
    return await asyncio.wait_for(proc.wait(), timeout=30.0)


_spawners: concurrent.futures.ThreadPoolExecutor | None = None
SPAWNER_THREADS = 16  # each waits on one short command (a CNI plugin, `runc delete`) until it ends


def _spawner() -> concurrent.futures.ThreadPoolExecutor:
    global _spawners
    if _spawners is None:
        _spawners = concurrent.futures.ThreadPoolExecutor(SPAWNER_THREADS, thread_name_prefix="spawn")
    return _spawners


async def run_captured(argv: Sequence[str], *, stdin: bytes | None = None, env: dict[str, str] | None = None,
                       timeout_s: float = 60.0) -> tuple[int, bytes, bytes]:
    """Run `argv` to its end with `stdin` given and its output captured: (exit code, stdout, stderr); a
    TimeoutError after `timeout_s`, the command killed, as it is when the caller is cancelled.

    Spawned by the standard library's subprocess in a thread of its own, not by the event loop: without a
    preexec_fn it spawns with vfork, where uvloop's spawn forks the whole process and holds the event loop
    until the child has exec'd (on the rep, 3.4 ms of the loop a spawn against 0.8 ms, and 3 times the
    CPU): the rep starting a hundred containers spawns a thousand plugins and runtimes."""
    import asyncio

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)

    def kill_if_spawned(future: asyncio.Future[subprocess.Popen[bytes]]) -> None:
        if not future.cancelled() and future.exception() is None:
            _kill_and_reap(future.result())

    loop = asyncio.get_running_loop()
    spawned = loop.run_in_executor(_spawner(), popen)
    try:
        proc = await asyncio.shield(spawned)
    except asyncio.CancelledError:  # it may still spawn: then it is killed and reaped
        spawned.add_done_callback(kill_if_spawned)
        raise
    try:
        out, err = await asyncio.shield(loop.run_in_executor(_spawner(), proc.communicate, stdin, timeout_s))
    except subprocess.TimeoutExpired:
        _kill_and_reap(proc)
        raise TimeoutError(f"{argv[0]} did not end within {timeout_s:g}s") from None
    except asyncio.CancelledError:
        with contextlib.suppress(OSError):
            proc.kill()  # the communicate under way in its thread ends with it, and reaps it
        raise
    return proc.returncode or 0, out, err


def _kill_and_reap(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    _spawner().submit(proc.communicate)  # its pipes drained and closed, its status reaped


def write_ready_file(path: str | os.PathLike[str], url: str, **extra: Any) -> None:
    """Announce readiness: one JSON line {"url", "pid", ...}, written atomically (tmp + rename)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"url": url, "pid": os.getpid(), **extra}) + "\n")
    os.replace(tmp, target)


def wait_ready_file(
    path: str | os.PathLike[str],
    timeout_s: float = 30.0,
    proc: subprocess.Popen[Any] | None = None,
    poll_s: float = 0.02,
) -> dict[str, Any]:
    """Wait for a component's ready file; fail early if `proc` exits first. Returns the parsed line."""
    target = Path(path)
    deadline = time.monotonic() + timeout_s
    while True:
        if target.exists():
            text = target.read_text().strip()
            if text:
                return dict(json.loads(text.splitlines()[0]))
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited with {proc.returncode} before writing {target}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"expected ready file {target} within {timeout_s}s; it did not appear")
        time.sleep(poll_s)
