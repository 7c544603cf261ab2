"""Headless Chromium driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`: JSON
messages, NUL-terminated, commands on the browser's fd 3 and answers on its fd 4), so a test can load a
page, then change the cluster, then read the same page's DOM again: what `--dump-dom` cannot.

Chromium is Debian's `chromium` package, which .ci/run installs: without it a browser test is skipped on a
developer's machine and fails in CI (CI=true). Every call is bounded in time; the browser and its helper
processes (its session) are killed when the context ends, whatever happened.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CALL_TIMEOUT_S = 30.0
# The browser wants the pipe on fds 3 and 4: this puts the inherited ends there (by way of fds above 10,
# whichever numbers they had) and execs it.
ON_FDS_3_AND_4 = """
import fcntl, os, sys
reads, writes = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])
os.dup2(reads, 3)
os.dup2(writes, 4)
os.execv(sys.argv[3], sys.argv[3:])
"""
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000")


def chromium_binary() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)", pytrace=False)
    pytest.skip("chromium is not installed: apt-get install chromium (.ci/run does)")


class DevTools:
    """One page of a headless Chromium, and the few DevTools calls the tests make."""

    def __init__(self, proc: subprocess.Popen[bytes], commands: int, answers: int) -> None:
        self.proc = proc
        self._commands = commands
        self._answers = answers
        self._buffer = b""
        self._next_id = 0
        self._session: str | None = None

    def call(self, method: str, timeout: float = CALL_TIMEOUT_S, **params: Any) -> dict[str, Any]:
        """Send one command (to the page once attached) and return its result; events are skipped."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if self._session is not None and not method.startswith("Target."):
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read(deadline, method)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise AssertionError(f"chromium refused {method}: {answer['error']}")
                return answer.get("result", {})

    def _read(self, deadline: float, waiting_for: str) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"expected chromium to answer {waiting_for}; no answer in time")
            ready, _, _ = select.select([self._answers], [], [], left)
            if ready:
                chunk = os.read(self._answers, 1 << 16)
                if not chunk:
                    raise AssertionError(
                        f"chromium exited ({self.proc.poll()}) before answering {waiting_for}"
                    )
                self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def open(self, url: str) -> None:
        """A new page, attached to (every later call goes to it), navigated to `url`."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} threw in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


@contextlib.contextmanager
def headless_chromium(profile: Path, *flags: str) -> Iterator[DevTools]:
    """A headless Chromium with a fresh profile in `profile`, stopped (with its helpers) on exit."""
    binary = chromium_binary()
    commands_read, commands_write = os.pipe()
    answers_read, answers_write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", ON_FDS_3_AND_4, str(commands_read), str(answers_write), binary, *FLAGS,
         "--remote-debugging-pipe", f"--user-data-dir={profile}", *flags],
        pass_fds=(commands_read, answers_write), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(commands_read)
    os.close(answers_write)
    try:
        yield DevTools(proc, commands_write, answers_read)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        os.close(commands_write)
        os.close(answers_read)
