"""A command run as on a person's terminal: its stdout a pseudo-terminal of a given width, as `script` would
give it, so rich sizes its tables from the terminal itself (not COLUMNS)."""

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

_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def run_in_terminal(args: Sequence[str], env: Mapping[str, str], columns: int, timeout: float = 60.0,
                    cwd: str | None = None) -> tuple[int, list[str]]:
    """`args` run with stdin/stdout/stderr a `columns`-wide pseudo-terminal: its exit status and the lines it
    wrote, control sequences removed. COLUMNS and LINES are taken out of `env`: the terminal says."""
    env = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(list(args), stdin=follower, stdout=follower, stderr=follower, env=env, cwd=cwd,
                            close_fds=True)
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{args} still writing after {timeout} s: {b''.join(chunks)[-500:]!r}")
            ready, _, _ = select.select([leader], [], [], left)
            if not ready:
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: every writer closed its side
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            terminate_then_kill(proc)
        with contextlib.suppress(OSError):
            os.close(leader)
    text = _ESCAPES.sub("", b"".join(chunks).decode("utf-8", "replace")).replace("\r\n", "\n")
    return code, text.splitlines()
