"""/v1/usage: what instances use (memory, CPU, disk), asked of the reps that hold them when a client asks.

One request per rep process (its cells named together), all at once, each bounded by REP_TIMEOUT_S; a rep
that does not answer is named in `unreachable` and its instances are missing from `items`. Nothing is
stored: the figures are the reps' latest samples (rep/usage.py), a few seconds old at most.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Query

from common.models import GUID_PATTERN

from ..errors import NotFound
from ..log_relay import Rep
from ..outbound import EXPECTED_REP_CELLS
from ..records import CellRecord
from .wire import TheBBS

log = logging.getLogger("bbs.usage")
router = APIRouter()
REP_TIMEOUT_S = 5.0
OPTIONAL_GUID = f"^$|{GUID_PATTERN}"


def _by_rep(cells: list[CellRecord]) -> list[Rep]:
    grouped: dict[str, list[str]] = {}
    for cell in cells:
        if cell.rep_url:
            grouped.setdefault(cell.rep_url.rstrip("/"), []).append(cell.cell_id)
    return [Rep(url, tuple(ids)) for url, ids in grouped.items()]


async def _ask(client: httpx.AsyncClient, rep: Rep) -> list[dict[str, Any]]:
    EXPECTED_REP_CELLS.set(rep.cells)  # this task's own context: only that rep is talked to
    response = await client.get(f"{rep.url}/usage", params={"cells": ",".join(rep.cells)},
                                timeout=REP_TIMEOUT_S)
    if response.status_code == 404:  # a rep from before usage was reported
        return []
    response.raise_for_status()
    items = response.json().get("items", [])
    return [i for i in items if isinstance(i, dict) and i.get("cell_id") in rep.cells]


@router.get("/v1/usage")
async def usage(
    bbs: TheBBS,
    process_guid: Annotated[str, Query(pattern=OPTIONAL_GUID, description="One app's instances.")] = "",
    cell_id: Annotated[str, Query(pattern=OPTIONAL_GUID, description="One cell's instances.")] = "",
) -> dict[str, Any]:
    """The latest memory (bytes, the working set), CPU (a fraction of one core, between the rep's last two
    samples) and disk (bytes) of each instance, with their limits and when they were sampled; the
    instances of an app, of a cell, or all. Instances of the sim executor have none."""
    async with bbs.uow.read() as tx:
        cells = await tx.list_cells(present_at=time.time())
        if process_guid:
            actuals = await tx.list_actuals(process_guid=process_guid)
            if not actuals and await tx.get_desired(process_guid) is None:
                raise NotFound(f"app {process_guid!r} not found")
            held = {a.cell_id for a in actuals if a.cell_id}
            cells = [c for c in cells if c.cell_id in held]
    if cell_id:
        cells = [c for c in cells if c.cell_id == cell_id]
    reps = _by_rep(cells)
    answers = await asyncio.gather(*(_ask(bbs.outbound.client, rep) for rep in reps), return_exceptions=True)
    items: list[dict[str, Any]] = []
    unreachable: list[str] = []
    for rep, answer in zip(reps, answers, strict=True):
        if isinstance(answer, BaseException):
            log.info("a rep's usage could not be read", extra={"data": {"rep_url": rep.url,
                                                                         "error": repr(answer)}})
            unreachable.extend(rep.cells)
            continue
        items.extend(i for i in answer if not process_guid or i.get("process_guid") == process_guid)
    items.sort(key=lambda i: (str(i.get("process_guid", "")), int(i.get("index", 0))))
    return {"items": items, "unreachable": sorted(unreachable)}
