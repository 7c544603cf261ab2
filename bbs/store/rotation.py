"""`vendue bbs rotate-keys`: every desired LRP, task and kept version of an LRP sealed again with the key
ring's active key.

Safe while BBS replicas serve: each batch is one write transaction (under the store's write lock, so no
write of a serving BBS interleaves with it), and replicas keep opening both the old and the new label.
Resumable: a pass walks the rows by guid and picks only those under another key (or in the clear), so a
pass stopped half-way is simply run again, and a pass over a rotated database changes nothing.

Before rotating, every replica needs the new key in its ring (as an older key first, then as the active
one): a replica lacking it could not read the rows this seals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..encryption import KeyRing, KeyRingError
from .store import Store

TABLES = ("desired_lrps", "tasks", "lrp_versions")
BATCH = 200  # rows per transaction: short enough that a serving BBS's writes wait milliseconds, not seconds


@dataclass
class Rotation:
    """What a pass did: rows sealed again per table, and what the database holds afterwards."""

    active: str
    resealed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TABLES, 0))
    batches: int = 0
    labels: dict[str, dict[str, int]] = field(default_factory=dict)  # table -> label ("clear") -> rows

    def to_json(self) -> dict[str, Any]:
        return {
            "active": self.active,
            "resealed": self.resealed,
            "batches": self.batches,
            "labels": self.labels,
        }


def required(keys: KeyRing | None) -> KeyRing:
    """The ring to rotate to; KeyRingError (one line for the operator) when there is none."""
    if keys is None:
        raise KeyRingError(
            "encryption_keys_file: rotate-keys needs the key ring (a file, or VENDUE_ENCRYPTION_KEYS)"
        )
    return keys


async def rotate_keys(
    store: Store, batch: int = BATCH, on_batch: Callable[[str, int], None] | None = None
) -> Rotation:
    """Reseal every row of TABLES not under the active key, `batch` rows per transaction; `on_batch(table,
    rows)` after each. Raises encryption.KeyRingError without a ring."""
    rotation = Rotation(required(store.keys).active)
    for table in TABLES:
        after = ""
        version_after = ("", 0)
        while True:
            async with store.write() as tx:
                if table == "lrp_versions":
                    keys = await tx.reseal_versions(version_after, batch)
                    guids = [f"{guid}/{version}" for guid, version in keys]
                    version_after = keys[-1] if keys else version_after
                else:
                    guids = await tx.reseal(table, after, batch)
            if guids:
                rotation.batches += 1
                rotation.resealed[table] += len(guids)
                if on_batch is not None:
                    on_batch(table, len(guids))
            if len(guids) < batch:
                break
            after = guids[-1]
    async with store.read() as tx:
        labels = await tx.key_labels()
    rotation.labels = {
        table: {("clear" if label is None else label): rows for label, rows in sorted(
            counts.items(), key=lambda item: (item[0] is not None, item[0] or ""))}
        for table, counts in labels.items()
    }
    return rotation
