"""A desired LRP's cell-loss policy (`on_cell_loss`, a column so a convergence pass reads it without the
definitions), and the auctioneer's reports of what cells accepted (`placements`), kept until the claims
arrive so that accepted work is not auctioned twice.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rows written before (and by an older BBS during a rolling upgrade) keep Diego's behaviour.
    op.add_column(
        "desired_lrps", sa.Column("on_cell_loss", sa.String(16), nullable=False, server_default="reschedule")
    )
    op.create_table(
        "placements",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("placed_at", sa.Float, nullable=False),
        sa.Column("accepted", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("placements")
    with op.batch_alter_table("desired_lrps") as batch:
        batch.drop_column("on_cell_loss")
