"""What a token is for: `api` (a bearer token, as every token before), `login` (a dashboard login link's,
good for one login) or `session` (the browser's, made by that login).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Tokens made before were bearer tokens, a dashboard's login links among them: they stay usable as such.
    op.add_column("tokens", sa.Column("purpose", sa.String(16), nullable=False, server_default="api"))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        batch.drop_column("purpose")
