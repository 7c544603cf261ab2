"""Domains (Diego's freshness, docs/diego-api.md): a domain upserted with a TTL is fresh until it expires;
convergence deletes extra instances of a desired LRP only while its domain is fresh (or was never set).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "domains",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("expires_at", sa.Float, nullable=True),  # None: fresh for ever (a TTL of 0)
    )


def downgrade() -> None:
    op.drop_table("domains")
