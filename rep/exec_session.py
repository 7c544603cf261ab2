"""A command run in a process-executor instance's context (`vendue exec`, docs/exec.md): the ExecSession of
rep/executor.py for real processes.

The command starts in a session of its own (setsid), with the instance's preexec (common/procutil.py:
its cgroup joined while still root, then its uid and gid, death with the rep), in its directory with its
environment. With a tty its stdin, stdout and stderr are the slave side of a pseudo-terminal, made its
controlling terminal (TIOCSCTTY), so Ctrl-C is the terminal's: SIGINT to the foreground process group, as
in any shell; without, three pipes.

Output is read only when the relay asks for the next chunk, and written onwards before it asks again: the
pipe's or the terminal's own buffer is all that waits, and a command whose reader is slow blocks on its
writes. `kill` ends everything in the command's session (an interactive shell puts each job in a process
group of its own, so the group alone would leave them): every process whose session id is the command's,
read from /proc.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import pty
import signal
import struct
import subprocess
import termios
from collections.abc import Callable
from pathlib import Path

from common.exec_stream import CHUNK_BYTES, STDERR, STDOUT, exit_status

from .executor import ExecSession

# How many chunks of the two pipes' output may wait for the relay (each at most CHUNK_BYTES).
PIPE_QUEUE = 2


def session_members(sid: int) -> list[int]:
    """Every process whose session id is `sid` (field 6 of /proc/PID/stat)."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()  # past "pid (comm) ": state ppid pgrp session ...
        if len(fields) > 3 and int(fields[3]) == sid:
            members.append(int(entry.name))
    return members


def kill_session(sid: int) -> None:
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def set_window(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _tty_preexec(slave: int, inner: Callable[[], None]) -> Callable[[], None]:
    """The terminal `slave` made the child's controlling one, in a session of its own, before `inner`
    changes its uid. uvloop (the rep's loop) runs a preexec_fn before libuv's setsid and dup2s, the
    standard library after them: so the session is made here unless it is already, and the terminal
    named by its own descriptor (open in the child either way until the exec)."""

    def preexec() -> None:
        if os.getsid(0) != os.getpid():
            os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
        inner()

    return preexec


async def _readable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _writable(fd: int) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)


class ProcessExecSession(ExecSession):
    def __init__(self, proc: asyncio.subprocess.Process, master: int | None) -> None:
        self.proc = proc
        self.pid = proc.pid
        self._master = master  # the pseudo-terminal's master side (tty), else None: pipes
        self._tty = master is not None
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=PIPE_QUEUE)
        self._pumps: list[asyncio.Task[None]] = []
        self._open_pumps = 0
        self.on_close: Callable[[], None] | None = None  # the executor forgets it
        if master is None:
            for stream, reader in ((STDOUT, proc.stdout), (STDERR, proc.stderr)):
                if reader is not None:
                    self._open_pumps += 1
                    self._pumps.append(asyncio.create_task(self._pump(stream, reader), name=f"exec-{stream}"))

    @classmethod
    async def start(cls, argv: list[str], *, cwd: Path, env: dict[str, str], preexec: Callable[[], None],
                    tty: bool, rows: int, cols: int) -> ProcessExecSession:
        """Raises OSError (a program that cannot run) or subprocess.SubprocessError (the preexec failed)."""
        if not tty:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec, limit=CHUNK_BYTES)
            return cls(proc, None)
        master, slave = pty.openpty()
        try:
            set_window(slave, rows, cols)
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env={**env, "TERM": env.get("TERM", "xterm")}, stdin=slave, stdout=slave,
                stderr=slave, start_new_session=True, preexec_fn=_tty_preexec(slave, preexec))
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        return cls(proc, master)

    async def _pump(self, stream: int, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(CHUNK_BYTES):
                await self._queue.put((stream, data))
        finally:
            self._open_pumps -= 1
            if self._open_pumps == 0:
                await self._queue.put(None)

    async def read(self) -> tuple[int, bytes] | None:
        if not self._tty:
            return await self._queue.get()
        while self._master is not None:
            try:
                data = os.read(self._master, CHUNK_BYTES)
            except BlockingIOError:
                await _readable(self._master)
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:  # every slave side closed: the command and what it started ended
                    return None
                raise
            return (STDOUT, data) if data else None
        return None

    async def write(self, data: bytes) -> None:
        if not self._tty:
            stdin = self.proc.stdin
            if stdin is None or stdin.is_closing():
                return
            stdin.write(data)
            with contextlib.suppress(ConnectionError):
                await stdin.drain()
            return
        view = memoryview(data)
        while view and self._master is not None:
            try:
                written = os.write(self._master, view)
            except BlockingIOError:
                await _writable(self._master)
                continue
            except OSError:  # the terminal is gone: so is the command
                return
            view = view[written:]

    def close_stdin(self) -> None:
        if not self._tty:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            return
        if self._master is None:
            return
        with contextlib.suppress(OSError):
            os.write(self._master, bytes((termios.tcgetattr(self._master)[6][termios.VEOF],)))

    def resize(self, rows: int, cols: int) -> None:
        if self._master is not None:
            with contextlib.suppress(OSError):
                set_window(self._master, rows, cols)  # the kernel sends SIGWINCH to the foreground group

    async def wait(self) -> int:
        return exit_status(await self.proc.wait())

    def kill(self) -> None:
        kill_session(self.pid)
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    async def close(self) -> None:
        """Kill, reap, and release the terminal and the pumps."""
        self.kill()
        with contextlib.suppress(ProcessLookupError):
            await self.proc.wait()
        for pump in self._pumps:
            pump.cancel()
        for pump in self._pumps:
            with contextlib.suppress(BaseException):
                await pump
        if self._master is not None:
            master, self._master = self._master, None
            os.close(master)
        if self.on_close is not None:
            self.on_close()
