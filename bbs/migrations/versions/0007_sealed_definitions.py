"""Encryption at rest: a desired LRP's or task's `command` and `env` may be kept sealed (AES-GCM) in
`sealed`, under the key named by `key_label`, instead of in the clear in `definition` (bbs/encryption.py).

Both columns are NULL on the rows written before (and by a BBS run without a key ring): those stay
readable as they are, and `vendue bbs rotate-keys` seals them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = ("desired_lrps", "tasks")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("key_label", sa.String(64), nullable=True))
        op.add_column(table, sa.Column("sealed", sa.Text(), nullable=True))


def downgrade() -> None:
    # Sealed rows would lose their command and env: refuse rather than drop them.
    connection = op.get_bind()
    for table in TABLES:
        if connection.execute(sa.text(f"SELECT 1 FROM {table} WHERE key_label IS NOT NULL LIMIT 1")).first():
            raise RuntimeError(f"{table} holds sealed rows, whose command and env a downgrade would lose")
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("sealed")
            batch.drop_column("key_label")
