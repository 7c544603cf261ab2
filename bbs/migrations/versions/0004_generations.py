"""A generation number per table a BBS keeps in memory: `actual_lrps` starts at 0 and every write
transaction that changes actual LRPs adds one (bbs/store/actual_cache.py).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    generations = op.create_table(
        "generations",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(generations, [{"name": "actual_lrps", "value": 0}])


def downgrade() -> None:
    op.drop_table("generations")
