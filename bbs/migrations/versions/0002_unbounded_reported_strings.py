"""Strings the reps report (instance guid, zone, host, address) unbounded, as on SQLite.

SQLite ignores VARCHAR lengths; PostgreSQL enforced them, so an over-long zone or host name failed a
lifecycle report there only. `text` costs PostgreSQL nothing over `varchar(n)`. On SQLite there is
nothing to change (and a batch table rebuild would cost time for no effect).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = {"instance_guid": 128, "zone": 128, "host": 255, "address": 300}


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for column, length in COLUMNS.items():
        op.alter_column("actual_lrps", column, type_=sa.Text(), existing_type=sa.String(length))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    for column, length in COLUMNS.items():
        op.alter_column("actual_lrps", column, type_=sa.String(length), existing_type=sa.Text())
