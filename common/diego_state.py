"""Where Diego's client reads a cell's state: Go's rep client asks `<rep_url>/state` of the URL a cell
advertises (bbs/diego: CellPresence.rep_url), so the URL carries a path of the cell's own on its rep, apart
from Vendue's `/state` (rep/diego_state.py serves it)."""

from __future__ import annotations

from urllib.parse import quote

PATH = "/v1/diego/cells/{cell_id}/state"


def cell_state_url(rep_url: str, cell_id: str) -> str:
    """The rep URL a cell advertises to Diego's clients (they add `/state`); "" without a rep URL."""
    if not rep_url:
        return ""
    return f"{rep_url.rstrip('/')}/v1/diego/cells/{quote(cell_id, safe='')}"
