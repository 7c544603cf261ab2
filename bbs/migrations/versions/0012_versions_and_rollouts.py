"""Versions of desired LRPs and their rollouts: a version on desired and actual LRPs, the last definitions
of each desired LRP (`lrp_versions`, sealed like `desired_lrps`), and `rollouts` (bbs/rollouts.py).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("desired_lrps") as batch:
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="1"))
    with op.batch_alter_table("actual_lrps") as batch:
        batch.add_column(sa.Column("version", sa.Integer, nullable=False, server_default="1"))
    op.create_table(
        "lrp_versions",
        sa.Column("process_guid", sa.String(128), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("definition", sa.JSON, nullable=False),
        sa.Column("key_label", sa.String(64), nullable=True),
        sa.Column("sealed", sa.Text, nullable=True),
    )
    op.create_table(
        "rollouts",
        sa.Column("process_guid", sa.String(128), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("data", sa.JSON, nullable=False),
    )
    op.create_index("ix_rollouts_state", "rollouts", ["state"])


def downgrade() -> None:
    op.drop_index("ix_rollouts_state", "rollouts")
    op.drop_table("rollouts")
    op.drop_table("lrp_versions")
    with op.batch_alter_table("actual_lrps") as batch:
        batch.drop_column("version")
    with op.batch_alter_table("desired_lrps") as batch:
        batch.drop_column("version")
