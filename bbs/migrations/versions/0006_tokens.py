"""Bearer tokens for people and scripts (`vendue tokens create`): only each secret's SHA-256 is stored.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=True),
        sa.Column("revoked_at", sa.Float, nullable=True),
    )
    op.create_index("ix_tokens_secret_sha256", "tokens", ["secret_sha256"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_tokens_secret_sha256", table_name="tokens")
    op.drop_table("tokens")
