"""Leases name where their holder can be reached (`url`), so peers can forward to the elected one
(the auctioneer's standby forwards requests, the BBS sends start requests to the holder).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A server default so rows written by an older BBS (and its inserts, during a rolling upgrade) read as "".
    op.add_column("leases", sa.Column("url", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("leases") as batch:
        batch.drop_column("url")
