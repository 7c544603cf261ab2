"""The first BBS schema: desired and actual LRPs, tasks, cell presence, leases.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "desired_lrps",
        sa.Column("process_guid", sa.String(128), primary_key=True),
        sa.Column("domain", sa.String(128), nullable=False),
        sa.Column("instances", sa.Integer, nullable=False),
        sa.Column("definition", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("mod_epoch", sa.String(64), nullable=False),
        sa.Column("mod_index", sa.Integer, nullable=False),
    )
    op.create_index("ix_desired_lrps_domain", "desired_lrps", ["domain"])
    op.create_table(
        "actual_lrps",
        sa.Column("process_guid", sa.String(128), primary_key=True),
        sa.Column("idx", sa.Integer, primary_key=True),
        sa.Column("presence", sa.String(16), primary_key=True),
        sa.Column("domain", sa.String(128), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("instance_guid", sa.String(128), nullable=False),
        sa.Column("cell_id", sa.String(128), nullable=False),
        sa.Column("zone", sa.String(128), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("ports", sa.JSON, nullable=False),
        sa.Column("address", sa.String(300), nullable=False),
        sa.Column("crash_count", sa.Integer, nullable=False),
        sa.Column("crash_reason", sa.Text, nullable=False),
        sa.Column("since", sa.Float, nullable=False),
        sa.Column("placement_error", sa.Text, nullable=False),
        sa.Column("mod_epoch", sa.String(64), nullable=False),
        sa.Column("mod_index", sa.Integer, nullable=False),
        sa.Column("auctioned_at", sa.Float, nullable=False),
    )
    op.create_index("ix_actual_lrps_state", "actual_lrps", ["state"])
    op.create_index("ix_actual_lrps_cell_id", "actual_lrps", ["cell_id"])
    op.create_table(
        "tasks",
        sa.Column("task_guid", sa.String(128), primary_key=True),
        sa.Column("domain", sa.String(128), nullable=False),
        sa.Column("definition", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("cell_id", sa.String(128), nullable=False),
        sa.Column("failed", sa.Boolean, nullable=False),
        sa.Column("failure_reason", sa.Text, nullable=False),
        sa.Column("exit_status", sa.Integer, nullable=True),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("rejection_count", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("first_completed_at", sa.Float, nullable=True),
        sa.Column("auctioned_at", sa.Float, nullable=False),
    )
    op.create_index("ix_tasks_domain", "tasks", ["domain"])
    op.create_index("ix_tasks_state", "tasks", ["state"])
    op.create_table(
        "cells",
        sa.Column("cell_id", sa.String(128), primary_key=True),
        sa.Column("presence", sa.JSON, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("disappeared", sa.Boolean, nullable=False),
    )
    op.create_index("ix_cells_expires_at", "cells", ["expires_at"])
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("token", sa.Integer, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("leases", "cells", "tasks", "actual_lrps", "desired_lrps"):
        op.drop_table(table)
