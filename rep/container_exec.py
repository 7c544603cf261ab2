"""`vendue exec` into a container (docs/exec.md, docs/containers.md "Exec"): the ExecSession of the
container executor, `runc exec` as Garden runs it for `cf ssh`.

- The process: `runc exec --process process.json`, the container's own process spec (its user, inside the
  user namespace when there is one, its capabilities, no_new_privs, rlimits, environment and working dir:
  what config.json gave the container's command) with the command's argv and the terminal; seccomp and
  the namespaces and cgroup are the container's, which runc joins. So the command sees only the
  container's files and processes.
- runc runs detached (`--detach`, `--pid-file`) under rep/exec_reaper.py, a child subreaper that inherits
  the command when runc exits and gives its exit status; the reaper and runc run in the instance's cgroup
  (runc moves the command into the container's).
- Without a tty the command's stdin, stdout and stderr are the reaper's pipes, which runc passes through.
  With one, runc makes the pseudo-terminal inside the container and sends its master over
  `--console-socket` (SCM_RIGHTS); the session reads and writes that master, and a resize is TIOCSWINSZ on
  it, exactly as the process executor's terminal (rep/exec_session.py).
- `kill` ends the command's session (a pidfd holds the command, so a reused pid is never signalled) and the
  reaper's (runc while it starts; the command without a tty). The container's stop kills everything in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.exec_stream import CHUNK_BYTES

from .exec_session import ProcessExecSession, _readable, kill_session
from .executor import ExecRefused

REAPER = Path(__file__).with_name("exec_reaper.py")
START_TIMEOUT_S = 30.0
DEFAULT_TERM = "xterm"


def exec_process(container: dict[str, Any], argv: list[str], tty: bool, rows: int,
                 cols: int) -> dict[str, Any]:
    """The process spec of `runc exec --process`: the container's own (config.json's `process`, so the
    command runs as the container's command does), with `argv`, and a terminal of rows x cols with `tty`
    (TERM the container's, else xterm)."""
    process = copy.deepcopy(container)
    process["args"] = list(argv)
    process["terminal"] = tty
    process.pop("consoleSize", None)
    if tty:
        process["consoleSize"] = {"height": rows, "width": cols}
        env = list(process.get("env", []))
        if not any(entry.startswith("TERM=") for entry in env):
            env.append(f"TERM={DEFAULT_TERM}")
        process["env"] = env
    return process


def receive_console(conn: socket.socket) -> int:
    """The pseudo-terminal master runc sends over the console socket: one message, the terminal's name with
    the descriptor as SCM_RIGHTS. OSError when none came."""
    _, fds, _, _ = socket.recv_fds(conn, 4096, 1)
    if not fds:
        raise OSError("runc sent no terminal over the console socket")
    for extra in fds[1:]:
        os.close(extra)
    return fds[0]


def runc_error(log_file: Path) -> str:
    """The last error runc logged (`--log-format json`), else what it wrote last."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except OSError:
        return "runc failed"
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("level") in ("error", "fatal") and entry.get("msg"):
            return str(entry["msg"])
    return lines[-1] if lines else "runc failed"


async def _read_status(fd: int) -> int | None:
    """The command's host pid the reaper writes once runc started it; None when it closed without."""
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = os.read(fd, 64)
        except BlockingIOError:
            await _readable(fd)
            continue
        if not chunk:
            break
        data += chunk
    return int(data) if data.endswith(b"\n") else None


class ContainerExecSession(ProcessExecSession):
    """The process executor's session over the reaper (`proc`) and, with a tty, runc's terminal master."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int | None, command_pid: int,
                 work: Path) -> None:
        super().__init__(proc, master)
        self.command_pid = command_pid  # on the host
        self._work = work
        try:
            self._pidfd: int | None = os.pidfd_open(command_pid)
        except ProcessLookupError:  # already ended (and reaped by the reaper)
            self._pidfd = None

    @classmethod
    async def enter(cls, runtime: str, runc_root: Path, container_id: str, process: dict[str, Any], *,
                    preexec: Callable[[], None]) -> ContainerExecSession:
        """Start `process` in the container; ExecRefused (with runc's reason) when it could not."""
        tty = bool(process.get("terminal"))
        work = Path(tempfile.mkdtemp(prefix="vd-exec-"))  # 0700; short: a unix socket's path is < 108 bytes
        listener: socket.socket | None = None
        proc: asyncio.subprocess.Process | None = None
        master: int | None = None
        try:
            (work / "process.json").write_text(json.dumps(process))
            runc = [runtime, "--root", str(runc_root), "--log", str(work / "runc.log"),
                    "--log-format", "json", "exec", "--detach", "--process", str(work / "process.json"),
                    "--pid-file", str(work / "pid")]
            if tty:
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listener.bind(str(work / "console.sock"))
                listener.listen(1)
                listener.setblocking(False)
                runc += ["--console-socket", str(work / "console.sock")]
            runc.append(container_id)
            status_r, status_w = os.pipe()
            try:
                os.set_blocking(status_r, False)
                pipe = subprocess.DEVNULL if tty else subprocess.PIPE
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-I", "-S", str(REAPER), str(status_w), str(work / "pid"), *runc,
                    cwd=work, env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
                    stdin=pipe, stdout=pipe, stderr=pipe, pass_fds=(status_w,), start_new_session=True,
                    preexec_fn=preexec, limit=CHUNK_BYTES)
                os.close(status_w)
                status_w = -1
                pid = await asyncio.wait_for(_read_status(status_r), START_TIMEOUT_S)
            finally:
                os.close(status_r)
                if status_w >= 0:
                    os.close(status_w)
            if pid is None:
                await asyncio.wait_for(proc.wait(), START_TIMEOUT_S)
                raise ExecRefused(f"could not start {process['args'][0]} in the container: "
                                  f"{runc_error(work / 'runc.log')}")
            if listener is not None:
                loop = asyncio.get_running_loop()
                # runc sent the terminal before it started the command: it waits in the backlog already.
                conn, _ = await asyncio.wait_for(loop.sock_accept(listener), START_TIMEOUT_S)
                with conn:
                    conn.setblocking(False)
                    await asyncio.wait_for(_readable(conn.fileno()), START_TIMEOUT_S)
                    master = receive_console(conn)
                os.set_blocking(master, False)
            session = cls(proc, master, pid, work)
        except BaseException as exc:
            if master is not None:
                os.close(master)
            if proc is not None and proc.returncode is None:
                kill_session(proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            shutil.rmtree(work, ignore_errors=True)
            if isinstance(exc, (OSError, subprocess.SubprocessError, TimeoutError)):
                raise ExecRefused(f"could not enter the container: {exc or type(exc).__name__}") from None
            raise
        finally:
            if listener is not None:
                listener.close()
        return session

    def kill(self) -> None:
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, 0)
            except ProcessLookupError:
                pass  # reaped: its pid may be another process's by now
            else:
                kill_session(self.command_pid)  # with a tty its own session: a shell's jobs, too
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        super().kill()  # the reaper's session: runc while it starts, the command without a tty

    async def close(self) -> None:
        await super().close()
        if self._pidfd is not None:
            pidfd, self._pidfd = self._pidfd, None
            os.close(pidfd)
        shutil.rmtree(self._work, ignore_errors=True)
