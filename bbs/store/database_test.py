"""Which database errors mean "not there for now" (the API answers 503, try again) and which do not."""

from __future__ import annotations

import sqlalchemy as sa

from bbs.store.database import database_unavailable


class _DriverError(Exception):
    def __init__(self, sqlstate: str | None) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def wrapped(sqlstate: str | None, kind: type[sa.exc.DBAPIError] = sa.exc.DBAPIError,
            invalidated: bool = False) -> sa.exc.DBAPIError:
    return kind("SELECT 1", {}, _DriverError(sqlstate), connection_invalidated=invalidated)


def test_a_server_away_starting_or_shutting_down_is_unavailable():
    assert database_unavailable(ConnectionRefusedError(111, "Connection refused"))
    assert database_unavailable(ConnectionResetError())
    assert database_unavailable(wrapped("57P03"))  # cannot_connect_now: recovering after a crash
    assert database_unavailable(wrapped("57P01"))  # admin_shutdown
    assert database_unavailable(wrapped("08006"))  # connection_failure
    assert database_unavailable(wrapped("53300"))  # too_many_connections
    assert database_unavailable(wrapped(None, invalidated=True))  # the connection dropped mid-statement
    assert database_unavailable(wrapped(None, sa.exc.OperationalError))
    assert database_unavailable(wrapped(None, sa.exc.InterfaceError))


def test_a_statement_refused_is_not():
    assert not database_unavailable(wrapped("23505", sa.exc.IntegrityError))  # unique_violation
    assert not database_unavailable(wrapped("42P01", sa.exc.ProgrammingError))  # undefined_table
    assert not database_unavailable(wrapped(None))
    assert not database_unavailable(ValueError("not the database's"))
