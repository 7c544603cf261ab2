"""An operator's cordon and drain of a cell (`vendue cells cordon|drain|uncordon`): the BBS's own state,
in columns a heartbeat never writes, so that it survives the rep's restarts and the BBS's.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows written before (and by an older BBS during a rolling upgrade) are neither cordoned nor draining.
    op.add_column("cells", sa.Column("cordoned", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("cells", sa.Column("draining", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("cells") as batch:
        batch.drop_column("draining")
        batch.drop_column("cordoned")
