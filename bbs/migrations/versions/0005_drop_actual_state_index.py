"""Drop the index on actual_lrps.state.

Every claim, start and crash changes an instance's state, and the index had to follow: on SQLite it
made inserting 250,000 actual LRPs about three times slower. Nothing hot filters on state any more
(summary counts come from the BBS's in-memory copy, 0004); the API's `?state=` filter scans.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_actual_lrps_state", table_name="actual_lrps")


def downgrade() -> None:
    op.create_index("ix_actual_lrps_state", "actual_lrps", ["state"])
