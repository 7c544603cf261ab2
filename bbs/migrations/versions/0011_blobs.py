"""The blob store: `blobs` (one row per verified blob) and `blob_chunks` (its bytes, on PostgreSQL).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "blobs",
        sa.Column("digest", sa.String(71), primary_key=True),
        sa.Column("blob_id", sa.String(32), nullable=False, unique=True),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("last_referenced_at", sa.Float, nullable=False),
    )
    op.create_table(
        "blob_chunks",
        sa.Column("blob_id", sa.String(32), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )
    if op.get_context().dialect.name == "postgresql":
        # Blobs are archives, compressed already: TOAST's compression would cost CPU for nothing.
        op.execute("ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_table("blob_chunks")
    op.drop_table("blobs")
