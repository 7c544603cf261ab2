"""A command driven through a pseudo-terminal, as a person at a terminal would: keys sent, output waited
for by pattern (with a deadline), the window resized (the kernel sends the command SIGWINCH: the terminal
is its controlling one), its exit status read."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence

from common.procutil import terminate_then_kill


def _controlling_tty() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class PtySession:
    def __init__(self, args: Sequence[str], env: Mapping[str, str], rows: int = 24, cols: int = 80,
                 cwd: str | None = None) -> None:
        self.leader, follower = pty.openpty()
        self.resize(rows, cols)
        self.proc = subprocess.Popen(list(args), stdin=follower, stdout=follower, stderr=follower,
                                     env=dict(env), cwd=cwd, close_fds=True, start_new_session=True,
                                     preexec_fn=_controlling_tty)
        os.close(follower)
        self.seen = b""

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.leader, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def send(self, data: bytes) -> None:
        os.write(self.leader, data)

    def expect(self, pattern: bytes, timeout: float = 15.0) -> re.Match[bytes]:
        """The first match of `pattern` in what the command wrote since the last match; AssertionError
        naming what it saw when none comes within `timeout`."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.seen)
            if found is not None:
                self.seen = self.seen[found.end():]
                return found
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"expected {pattern!r} within {timeout} s, saw {self.seen[-800:]!r}")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.leader], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.leader, 65536)
        except OSError:  # EIO: the command and everything holding the terminal ended
            return False
        self.seen += data
        return bool(data)

    def wait(self, timeout: float = 15.0) -> int:
        """The exit status, the rest of its output read meanwhile."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self._read(0.05)
        return self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.proc.poll() is None:
            terminate_then_kill(self.proc)
        with contextlib.suppress(OSError):
            os.close(self.leader)
