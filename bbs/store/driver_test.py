"""DriverStatement: compiled per dialect, positional, and refusing rows in an order it does not bind."""

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.dialects.sqlite import aiosqlite

from bbs.store import tables as t
from bbs.store.driver import DriverStatement

UPDATE = (
    t.actual_lrps.update()
    .where(t.actual_lrps.c.process_guid == sa.bindparam("k_process_guid"))
    .values(state=sa.bindparam("state"), ports=sa.bindparam("ports"))
)


@pytest.mark.parametrize("dialect", [aiosqlite.dialect(), asyncpg.dialect()], ids=["sqlite", "postgresql"])
def test_binds_positionally_with_the_columns_conversions(dialect) -> None:
    statement = DriverStatement(UPDATE, t.actual_lrps, dialect, ["state", "ports", "k_process_guid"])
    assert statement.names == ["state", "ports", "k_process_guid"]
    rows = statement.rows(
        [("RUNNING", [{"container_port": 8080, "host_port": 61000}], "web"), ("CLAIMED", [], "api")]
    )
    assert rows[0][0] == "RUNNING" and rows[0][2] == "web"
    assert isinstance(rows[0][1], str) and "61000" in rows[0][1], "the JSON column is encoded by its type"
    assert rows[1][1] == "[]"


def test_rows_in_another_order_than_the_compiled_binds_are_refused() -> None:
    with pytest.raises(ValueError, match="binds"):
        DriverStatement(UPDATE, t.actual_lrps, aiosqlite.dialect(), ["ports", "state", "k_process_guid"])
