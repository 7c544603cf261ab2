"""Versions of desired LRPs (their last VERSIONS_KEPT definitions, sealed like the desired LRP's own) and
their rollouts (the last ROLLOUTS_KEPT each, bbs/rollouts.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa

from ..records import DesiredDefinition
from . import tables as t
from .sealing import open_definition, seal_definition
from .transaction import Transaction

VERSIONS_KEPT = 10
ROLLOUTS_KEPT = 10


@dataclass(slots=True)
class VersionRecord:
    process_guid: str
    version: int
    created_at: float
    definition: DesiredDefinition


def _version_guid(process_guid: str, version: int) -> str:
    # The associated data names the version: a sealed definition copied to another version does not open.
    return f"{process_guid}/{version}"


class VersionQueries(Transaction):
    async def insert_version(self, record: VersionRecord) -> None:
        """Store a version, and forget those older than the last VERSIONS_KEPT."""
        clear, label, sealed = seal_definition(
            self._keys, t.lrp_versions.name, _version_guid(record.process_guid, record.version),
            record.definition,
        )
        await self.connection.execute(t.lrp_versions.insert().values(
            process_guid=record.process_guid, version=record.version, created_at=record.created_at,
            definition=clear, key_label=label, sealed=sealed,
        ))
        c = t.lrp_versions.c
        await self.connection.execute(t.lrp_versions.delete().where(
            c.process_guid == record.process_guid, c.version <= record.version - VERSIONS_KEPT
        ))

    async def list_versions(self, process_guid: str) -> list[VersionRecord]:
        """Newest first."""
        c = t.lrp_versions.c
        query = sa.select(t.lrp_versions).where(c.process_guid == process_guid).order_by(c.version.desc())
        return await self._records(query, self._version)

    async def get_version(self, process_guid: str, version: int) -> VersionRecord | None:
        c = t.lrp_versions.c
        query = sa.select(t.lrp_versions).where(c.process_guid == process_guid, c.version == version)
        found = await self._records(query, self._version)
        return found[0] if found else None

    async def delete_versions_of(self, process_guid: str) -> None:
        await self.connection.execute(
            t.lrp_versions.delete().where(t.lrp_versions.c.process_guid == process_guid))
        await self.connection.execute(t.rollouts.delete().where(t.rollouts.c.process_guid == process_guid))

    def _version(self, row: sa.Row) -> VersionRecord:
        definition = open_definition(
            self._keys, t.lrp_versions.name, _version_guid(row.process_guid, row.version),
            cast(DesiredDefinition, row.definition), row.key_label, row.sealed,
        )
        return VersionRecord(row.process_guid, row.version, row.created_at, definition)

    # --- rollouts -------------------------------------------------------------------------------------

    async def put_rollout(self, process_guid: str, seq: int, data: Mapping[str, Any]) -> None:
        """Write a rollout (insert or replace), and forget those older than the last ROLLOUTS_KEPT."""
        c = t.rollouts.c
        where = (c.process_guid == process_guid, c.seq == seq)
        updated = await self.connection.execute(
            t.rollouts.update().where(*where).values(state=data["state"], data=dict(data))
        )
        if updated.rowcount == 0:
            await self.connection.execute(t.rollouts.insert().values(
                process_guid=process_guid, seq=seq, state=data["state"], data=dict(data)
            ))
            await self.connection.execute(t.rollouts.delete().where(
                c.process_guid == process_guid, c.seq <= seq - ROLLOUTS_KEPT
            ))

    async def list_rollouts(self, process_guid: str) -> list[tuple[int, dict[str, Any]]]:
        """(seq, data), newest first."""
        c = t.rollouts.c
        query = sa.select(c.seq, c.data).where(c.process_guid == process_guid).order_by(c.seq.desc())
        return [(row.seq, dict(row.data)) for row in await self._rows(query)]

    async def active_rollouts(self, states: frozenset[str]) -> list[tuple[int, dict[str, Any]]]:
        """(seq, data) of every rollout in one of `states`: what the driver carries on."""
        c = t.rollouts.c
        query = sa.select(c.seq, c.data).where(c.state.in_(sorted(states))).order_by(
            self._text_order(c.process_guid), c.seq)
        return [(row.seq, dict(row.data)) for row in await self._rows(query)]
