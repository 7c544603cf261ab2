"""`vendue why APP [INDEX]`: why an instance is where it is, or why no cell took it.

Asks the BBS (`GET /v1/actual_lrps/{guid}/{index}/placement`, any reader), which keeps what the
auctioneer reported of each instance's latest auction (bbs/explanations.py): for a placed instance the
candidates the auction scored, best first, with each part of Diego's score and what set the winner apart
(the score, or at equal score the zone met first, then the cell's index in its zone) and why its zone was
tried first; for an unplaced one Diego's placement error and how many cells each filter turned away.
Without INDEX, every index the app desires. `--json` prints the wire's PlacementExplanation (a list
without INDEX). Exit status: 0; 1 the BBS is unreachable, the app does not exist or nothing is known of
it; 2 bad input.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from common.models import PlacementExplanation, Presence

from .bbs_client import BBSClient, NotFound
from .cli import app
from .client_cmd import (
    USAGE_ERROR,
    AsJson,
    Connection,
    OneLineErrorsCommand,
    bbs_command,
    connect,
    console,
    fail,
    print_json,
)
from .terminal_text import markup

# The parts of Diego's score in the order scoring.lrp_score adds them, with the columns' short names.
COMPONENTS = {
    "memory_used": "memory",
    "disk_used": "disk",
    "containers_used": "containers",
    "starting": "starting",
    "same_process": "same app",
    "bin_pack": "bin pack",
    "cache_locality": "cache",  # beyond Diego: minus --cache-weight on a cell caching the app
    "cached": "cached",  # whether the cell's host caches the app's source blob (yes/no)
}
# A breakdown part starts with its count of cells ("3 insufficient memory (...)"): split only there.
PART = re.compile(r", (?=\d+ )")


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def why(
    name: Annotated[str, typer.Argument(metavar="APP", help="The app's process guid.", show_default=False)],
    index: Annotated[int | None, typer.Argument(metavar="[INDEX]", help="One instance (default: every one).",
                                                show_default=False)] = None,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Why an app's instances are where they are: the candidates each auction scored and what decided,
    or why no cell could take one (per filter)."""
    if index is not None and index < 0:
        fail("INDEX: must be 0 or more", USAGE_ERROR)
    with connect(connection) as client:
        if index is not None:
            try:
                found = [client.placement(name, index)]
            except NotFound as exc:
                fail(_not_known(client, name, str(exc)))
            unknown: list[int] = []
        else:
            found, unknown = _every_index(client, name)
        # Where an instance is can follow from its crash (a failed health check, say): shown beside it.
        crashes = {} if as_json else {a.index: a for a in client.actual_lrps(name)
                                      if a.crash_reason and a.presence == Presence.ORDINARY}
    if as_json:
        rows = [e.model_dump(mode="json") for e in found]
        print_json(rows[0] if index is not None else rows)
        return
    out = console(listing=False)
    for explanation in found:
        print_explanation(out, explanation)
        crashed = crashes.get(explanation.index)
        if crashed is not None:
            out.print(f"  last crash: [red]{markup(crashed.crash_reason)}[/red] "
                      f"(crashes: {crashed.crash_count})")
    if unknown:
        out.print(f"[dim]no explanation known for {markup(name)} index {', '.join(map(str, unknown))}: "
                  f"not auctioned since this BBS started (explanations are kept in its memory)[/dim]")


def _not_known(client: BBSClient, name: str, message: str) -> str:
    try:
        client.desired_lrp(name)
    except NotFound:
        return f"no app named {name!r}"
    return message.split(": 404 ", 1)[-1]


def _every_index(client: BBSClient, name: str) -> tuple[list[PlacementExplanation], list[int]]:
    try:
        desired = client.desired_lrp(name)
    except NotFound:
        fail(f"no app named {name!r}")
    found, unknown = [], []
    for i in range(desired.instances):
        try:
            found.append(client.placement(name, i))
        except NotFound:
            unknown.append(i)
    if not found:
        fail(
            f"no placement explanation known for any instance of {name}: not auctioned since this BBS "
            f"started (explanations are kept in its memory)"
        )
    return found, unknown


def print_explanation(out: Console, why: PlacementExplanation) -> None:
    label = f"[bold]{markup(why.process_guid)}/{why.index}[/bold]"
    if not why.placed:
        out.print(f"{label} not placed: [red]{markup(why.error)}[/red]")
        table = breakdown(why.detail)
        if table is not None:
            out.print(table)
        elif why.detail:
            out.print(f"  {markup(why.detail)}")
        return
    strategy = f" ({markup(why.strategy)})" if why.strategy and why.strategy != "diego" else ""
    out.print(f"{label} placed on [green]{markup(why.cell_id)}[/green]{strategy}: decided by "
              f"{markup(why.decided_by)}" + (f"; {markup(why.zone_order)}" if why.zone_order else ""))
    out.print(candidates(why))


def candidates(why: PlacementExplanation) -> Table:
    present = {k for c in why.candidates for k in c.components if k != "score"}
    names = [n for n in COMPONENTS if n in present] + sorted(present - set(COMPONENTS))
    cache = " + cache" if "cache_locality" in present else ""
    table = Table(
        caption="score = mean(memory, disk, containers used once placed) + starting + same app + bin "
        f"pack{cache}; the lowest wins, at equal score the zone met first, then the lower index in zone",
        caption_justify="left",
    )
    for column in ("", "cell", "zone", "index", "score", *(COMPONENTS.get(n, n) for n in names)):
        table.add_column(column, no_wrap=True, justify="right" if column in ("index", "score") else "left")
    for c in why.candidates:
        parts = c.components
        table.add_row("→" if c.chosen else "", markup(c.cell_id), markup(c.zone), str(c.zone_index),
                      f"{parts['score']:.4f}" if "score" in parts else "",
                      *(_part(n, parts) for n in names))
    return table


def _part(name: str, parts: dict[str, float]) -> str:
    if name not in parts:
        return ""
    if name == "cached":
        return "yes" if parts[name] else "no"
    return f"{parts[name]:.3g}"


def breakdown(detail: str) -> Table | None:
    """The per-filter breakdown ("0/3 cells fit: 3 insufficient memory (...); 1 cells left out: ...") as
    a table of cells per reason, or None when the detail is not one."""
    detail, _, note = detail.partition("; ")
    head, sep, parts = detail.partition(" cells fit: ")
    if not sep:
        return None
    table = Table(caption=markup(f"{head} cells fit" + (f"; {note}" if note else "")), caption_justify="left")
    table.add_column("cells", justify="right")
    table.add_column("turned away by")
    for part in PART.split(parts):
        count, _, reason = part.partition(" ")
        table.add_row(markup(count), markup(reason))
    return table
