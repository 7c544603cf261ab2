"""Desired LRPs: their definitions sealed on the way in and opened on the way out (sealing.py), once per
record read; a convergence pass reads only their sizes (DesiredSize), definitions unread."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from ..records import DesiredRecord, DesiredSize
from . import tables as t
from .sealing import clear_part, open_definition, seal_definition
from .transaction import Transaction, in_chunks


def _desired_columns(record: DesiredRecord) -> dict[str, Any]:
    """Every column but the definition and its sealed part."""
    return {
        "process_guid": record.process_guid,
        "domain": record.domain,
        "instances": record.instances,
        "created_at": record.created_at,
        "mod_epoch": record.mod_epoch,
        "mod_index": record.mod_index,
        "on_cell_loss": record.on_cell_loss,
        "version": record.version,
    }


def _without_secrets(definition: Mapping[str, Any]) -> dict[str, Any]:
    return clear_part(definition)


class DesiredQueries(Transaction):
    def _desired(self, row: sa.Row) -> DesiredRecord:
        return DesiredRecord(
            process_guid=row.process_guid,
            domain=row.domain,
            instances=row.instances,
            definition=open_definition(
                self._keys, t.desired_lrps.name, row.process_guid, row.definition, row.key_label, row.sealed
            ),
            created_at=row.created_at,
            mod_epoch=row.mod_epoch,
            mod_index=row.mod_index,
            on_cell_loss=row.on_cell_loss,
            version=row.version,
        )

    def _desired_params(self, record: DesiredRecord) -> dict[str, Any]:
        guid = record.process_guid
        clear, label, sealed = seal_definition(self._keys, t.desired_lrps.name, guid, record.definition)
        return {**_desired_columns(record), "definition": clear, "key_label": label, "sealed": sealed}

    async def _read_desired(
        self, *where: sa.ColumnElement[bool], ordered: bool = False
    ) -> list[DesiredRecord]:
        """The one way desired LRP rows are read: those matching `where`, by process guid when `ordered`."""
        query = sa.select(t.desired_lrps).where(*where)
        if ordered:
            query = query.order_by(self._text_order(t.desired_lrps.c.process_guid))
        return await self._records(query, self._desired)

    async def get_desired(self, process_guid: str) -> DesiredRecord | None:
        found = await self._read_desired(t.desired_lrps.c.process_guid == process_guid)
        return found[0] if found else None

    async def desired_by_guid(self, process_guids: Iterable[str]) -> dict[str, DesiredRecord]:
        found: dict[str, DesiredRecord] = {}
        for where in in_chunks(t.desired_lrps.c.process_guid, process_guids):
            found.update((record.process_guid, record) for record in await self._read_desired(where))
        return found

    async def list_desired(self, domain: str | None = None) -> list[DesiredRecord]:
        where = [] if domain is None else [t.desired_lrps.c.domain == domain]
        return await self._read_desired(*where, ordered=True)

    async def desired_sizes(self) -> list[DesiredSize]:
        """Every desired LRP's instance count and cell-loss policy (what a convergence pass needs),
        definitions unread."""
        c = t.desired_lrps.c
        query = sa.select(c.process_guid, c.domain, c.instances, c.on_cell_loss).order_by(
            self._text_order(c.process_guid))
        return [DesiredSize(*row) for row in await self._rows(query)]

    async def desired_totals(self) -> tuple[int, int]:
        """(desired LRPs, instances they desire in total): what the quotas (bbs/quotas.py) count."""
        c = t.desired_lrps.c
        row = (await self._rows(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(c.instances), 0))))[0]
        return int(row[0]), int(row[1])

    async def insert_desireds(self, records: Sequence[DesiredRecord]) -> bool:
        """Insert several in one statement; False (and nothing written) when one exists already."""
        try:
            # In a savepoint: on PostgreSQL a failed statement would void the whole transaction.
            async with self.connection.begin_nested():
                await self._executemany(t.desired_lrps.insert(), [self._desired_params(r) for r in records])
        except IntegrityError:
            return False
        return True

    async def update_desired(self, record: DesiredRecord, definition_changed: bool = False) -> None:
        """Write `record` over its row. Unless `definition_changed` (a new version), its command and env
        have not changed (a scale): a sealed row keeps its sealed part as it is, never sealed again; a row
        in the clear, or a new definition, is written whole (and sealed, with a ring)."""
        where = t.desired_lrps.c.process_guid == record.process_guid
        if self._keys is not None and not definition_changed:
            kept = await self.connection.execute(
                t.desired_lrps.update()
                .where(where, t.desired_lrps.c.key_label.is_not(None))
                .values({**_desired_columns(record), "definition": _without_secrets(record.definition)})
            )
            if kept.rowcount == 1:
                return
        await self.connection.execute(
            t.desired_lrps.update().where(where).values(self._desired_params(record))
        )

    async def delete_desired(self, process_guid: str) -> None:
        await self.connection.execute(
            t.desired_lrps.delete().where(t.desired_lrps.c.process_guid == process_guid)
        )
