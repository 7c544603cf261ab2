"""The BBS schema as SQLAlchemy Core tables (the migrations create exactly this).

Full definitions are JSON columns; what queries filter or sort on is a column of its own. Times are
float epoch seconds (portable across SQLite and PostgreSQL, and cheap to compare). Strings that come
from outside unchecked (what reps report) are Text: PostgreSQL enforces VARCHAR lengths, SQLite not.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData()


def sealed_columns() -> list[sa.Column[str]]:
    """A definition's `command` and `env` sealed under the key `key_label` (0007; store/sealing.py), taken
    out of the JSON `definition`; both NULL where they are stored in the clear (no key ring)."""
    return [sa.Column("key_label", sa.String(64), nullable=True), sa.Column("sealed", sa.Text, nullable=True)]


desired_lrps = sa.Table(
    "desired_lrps",
    metadata,
    sa.Column("process_guid", sa.String(128), primary_key=True),
    sa.Column("domain", sa.String(128), nullable=False, index=True),
    sa.Column("instances", sa.Integer, nullable=False),
    sa.Column("definition", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("mod_epoch", sa.String(64), nullable=False),
    sa.Column("mod_index", sa.Integer, nullable=False),
    *sealed_columns(),
    sa.Column("on_cell_loss", sa.String(16), nullable=False, server_default="reschedule"),  # 0008
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),  # 0012
)

actual_lrps = sa.Table(
    "actual_lrps",
    metadata,
    sa.Column("process_guid", sa.String(128), primary_key=True),
    sa.Column("idx", sa.Integer, primary_key=True),
    sa.Column("presence", sa.String(16), primary_key=True),
    sa.Column("domain", sa.String(128), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # no index: see migration 0005
    sa.Column("instance_guid", sa.Text, nullable=False),
    sa.Column("cell_id", sa.String(128), nullable=False, index=True),
    sa.Column("zone", sa.Text, nullable=False),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("ports", sa.JSON, nullable=False),
    sa.Column("address", sa.Text, nullable=False),
    sa.Column("crash_count", sa.Integer, nullable=False),
    sa.Column("crash_reason", sa.Text, nullable=False),
    sa.Column("since", sa.Float, nullable=False),
    sa.Column("placement_error", sa.Text, nullable=False),
    sa.Column("mod_epoch", sa.String(64), nullable=False),
    sa.Column("mod_index", sa.Integer, nullable=False),
    sa.Column("auctioned_at", sa.Float, nullable=False),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),  # 0012
)

# A desired LRP's definitions, the last few (VERSIONS_KEPT): what a rollback goes back to (0012). The
# definition is sealed like the desired LRP's own, under this table's name.
lrp_versions = sa.Table(
    "lrp_versions",
    metadata,
    sa.Column("process_guid", sa.String(128), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("definition", sa.JSON, nullable=False),
    *sealed_columns(),
)

# Rollouts (bbs/rollouts.py), the last few per desired LRP: their state survives a restart and a change of
# convergence leader (0012). `data` is the Rollout as the API shows it, plus the driver's own fields.
rollouts = sa.Table(
    "rollouts",
    metadata,
    sa.Column("process_guid", sa.String(128), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("data", sa.JSON, nullable=False),
)

tasks = sa.Table(
    "tasks",
    metadata,
    sa.Column("task_guid", sa.String(128), primary_key=True),
    sa.Column("domain", sa.String(128), nullable=False, index=True),
    sa.Column("definition", sa.JSON, nullable=False),
    sa.Column("state", sa.String(16), nullable=False, index=True),
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
    *sealed_columns(),
)

cells = sa.Table(
    "cells",
    metadata,
    sa.Column("cell_id", sa.String(128), primary_key=True),
    sa.Column("presence", sa.JSON, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False, index=True),
    sa.Column("disappeared", sa.Boolean, nullable=False),
    # An operator's cordon and drain (0009): never written by a heartbeat.
    sa.Column("cordoned", sa.Boolean, nullable=False, default=False, server_default=sa.false()),
    sa.Column("draining", sa.Boolean, nullable=False, default=False, server_default=sa.false()),
)

# One row per elected role (e.g. "convergence"): whoever holds an unexpired lease runs it; the
# fencing token grows with every change of owner.
leases = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(128), nullable=False),
    sa.Column("token", sa.Integer, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.Column("url", sa.Text, nullable=False, server_default=""),  # where the holder answers (0003)
)

# Domains upserted through the Diego API (0013): fresh until `expires_at` (None: for ever); convergence
# deletes a desired LRP's extra instances only while its domain is fresh or was never upserted.
domains = sa.Table(
    "domains",
    metadata,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("expires_at", sa.Float, nullable=True),
)

# Generation numbers of tables a BBS keeps in memory (0004): a write transaction that changes
# actual_lrps adds one under the write lock, so a BBS whose copy is at the stored number knows that
# no other replica wrote since (see actual_cache.py).
generations = sa.Table(
    "generations",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

# What cells accepted, as the auctioneer reported it (0008): one row per report, `accepted` as it came
# ({cell_id: {"lrps": "pg:index ...", "tasks": "guid ..."}}, common/accepted_work.py), kept until every
# instance and task in it was claimed or placed again (bbs/placements.py). `placed_at`: when the BBS stored
# it.
placements = sa.Table(
    "placements",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("placed_at", sa.Float, nullable=False),
    sa.Column("accepted", sa.JSON, nullable=False),
)

# Bearer tokens of people and scripts (0006): a token is `vdt_<secret>`, and only the SHA-256 of the whole
# string is kept, so a stolen database (or backup) holds no usable token. Rows stay after a revoke
# (`revoked_at`), so `vendue tokens list` shows what was revoked when.
tokens = sa.Table(
    "tokens",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True, index=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=True),
    sa.Column("revoked_at", sa.Float, nullable=True),
    # api (a bearer token), login (`vendue dashboard`'s link: used once, at /ui/login), session (what a
    # login gives the browser).
    sa.Column("purpose", sa.String(16), nullable=False, server_default="api"),
)

# The blob store (0011; bbs/store/blobs.py, docs/artifacts.md): one row per stored blob, written only once
# its bytes are verified against `digest` and durable, so a row is what makes a blob servable. `blob_id`
# names its bytes (a file in <data-dir>/blobs/ on SQLite, its blob_chunks rows on PostgreSQL): a fresh one
# per upload, so an upload racing a garbage collection of the same digest never shares bytes with it.
# `last_referenced_at`: when a desired LRP or task last named it (or it was uploaded); the collection
# removes a blob nothing has named for the grace period.
blobs = sa.Table(
    "blobs",
    metadata,
    sa.Column("digest", sa.String(71), primary_key=True),
    sa.Column("blob_id", sa.String(32), nullable=False, unique=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("last_referenced_at", sa.Float, nullable=False),
)

# A blob's bytes on PostgreSQL, in chunks of CHUNK_BYTES (bbs/store/blobs.py): every replica reads them, and a
# download holds one chunk at a time.
blob_chunks = sa.Table(
    "blob_chunks",
    metadata,
    sa.Column("blob_id", sa.String(32), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True),
    sa.Column("data", sa.LargeBinary, nullable=False),
)
