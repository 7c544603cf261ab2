"""The auctioneer's two transport seams: where bids come from and how work reaches a cell.

Both ask each rep process once, whatever the number of its cells (the one rep API, rep/api.py).
HTTP: cells.CellFetcher and dispatch.Dispatcher: GET {rep_url}/state and POST {rep_url}/work.
NATS: nats_cells.NatsCellStateSource (a request per process on vendue.cells.state.<rep_id>) and
nats_dispatch.NatsWorkSender (request/reply on vendue.rep.<rep_id>.work). The auction sees only these.
"""

from __future__ import annotations

from typing import Protocol

from .cells import FetchedCells
from .dispatch import CellWork, DispatchOutcome


class CellStateSource(Protocol):
    async def fetch(self) -> FetchedCells:
        """Every present, non-evacuating cell's state, gathered by one deadline; the rest dropped."""
        ...


class WorkSender(Protocol):
    async def send(self, works: list[CellWork]) -> DispatchOutcome:
        """Each winning cell's work; what did not arrive or was refused comes back as rejections."""
        ...
