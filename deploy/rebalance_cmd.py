"""`vendue rebalance [--dry-run] [--app G] [--max-moves N] [--wait] [--json]`: put instances back where
the auction would have put them, through the BBS (`POST /v1/rebalance`, admin).

The BBS plans (placement/rebalance/; a move's reason: `zone_spread`, an app whose zone spread is
worse than one while an emptier zone has room; `cell_load`, a cell far above the mean memory fraction;
`load_mark`, for loadmark apps a cell far above the mean load mark; `strategy_margin`, an instance its
strategy would now place elsewhere by a clear margin) and carries the moves out make-before-break: the
new instance runs before the old one stops; one whose new instance crashes or is late is abandoned and the
old one kept (bbs/rebalancer.py). `--dry-run` prints the plan, each move with its reason and gain, and
changes nothing. `--wait` follows the moves (`GET /v1/rebalance`) until each finished: exit 0 when every
one completed, 1 when some were abandoned or skipped (named) or at `--timeout`; 2 bad input.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from common.models import RebalanceMove, RebalanceRequest

from .bbs_client import BBSClient
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

POLL_S = 0.5  # how often --wait looks at the moves


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def rebalance(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan (reasons, gains); change nothing.")
    ] = False,
    app_name: Annotated[
        str | None,
        typer.Option("--app", metavar="APP", help="Only this app's instances.", show_default=False),
    ] = None,
    max_moves: Annotated[
        int, typer.Option("--max-moves", help="At most this many moves (0: every one).")
    ] = 0,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait until every move finished: exit 0 when all "
            "completed, 1 when some were abandoned or at --timeout.",
        ),
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", help="With --wait: how long to wait, seconds.")
    ] = 600.0,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Move running instances back into balance (zone spread, cell load, load mark, strategy margin),
    make-before-break."""
    if max_moves < 0:
        fail(f"--max-moves: must be 0 or more, got {max_moves}", USAGE_ERROR)
    if timeout <= 0:
        fail(f"--timeout: must be greater than 0, got {timeout:g}", USAGE_ERROR)
    with connect(connection) as client:
        plan = client.rebalance(RebalanceRequest(dry_run=dry_run, app=app_name, max_moves=max_moves))
        finished = _wait(client, plan.moves, timeout) if wait and not dry_run and plan.moves else None
    if as_json:
        out = plan.model_dump(mode="json")
        if finished is not None:
            out["finished"] = [m.model_dump(mode="json") for m in finished]
        print_json(out)
    else:
        _print(plan.moves, dry_run, finished)
    if finished is not None and (
        len(finished) < len(plan.moves) or any(m.outcome != "completed" for m in finished)
    ):
        if not as_json:
            late = len(plan.moves) - len(finished)
            typer.echo(
                f"error: {len(finished) - _completed(finished)} moves not completed"
                + (f", {late} still running after {timeout:g}s" if late else ""),
                err=True,
            )
        raise typer.Exit(1)


def _key(move: RebalanceMove) -> tuple[str, int, str]:
    return (move.process_guid, move.index, move.from_cell)


def _completed(moves: list[RebalanceMove]) -> int:
    return sum(1 for m in moves if m.outcome == "completed")


def _wait(client: BBSClient, moves: list[RebalanceMove], timeout: float) -> list[RebalanceMove]:
    """Poll until each planned move finished (or the deadline): the finished ones."""
    wanted = {_key(m) for m in moves}
    deadline = time.monotonic() + timeout
    while True:
        status = client.rebalance_status()
        done = {_key(m): m for m in status.finished if _key(m) in wanted}
        pending = {_key(m) for m in (*status.queued, *status.in_flight)} & wanted
        if not pending or time.monotonic() >= deadline:
            return list(done.values())
        time.sleep(POLL_S)


def _worth_saying(done: RebalanceMove) -> bool:
    """Why a move ended, unless it simply completed as planned."""
    return done.outcome != "completed" or done.landed_on not in (None, done.to_cell)


def _print(moves: list[RebalanceMove], dry_run: bool, finished: list[RebalanceMove] | None) -> None:
    if not moves:
        console().print("balanced: nothing to move")
        return
    outcome = {_key(m): m for m in finished or ()}
    table = Table(title=f"{len(moves)} moves" + (" (dry run: nothing changed)" if dry_run else ""))
    for column in (
        "instance",
        "from",
        "to",
        "reason",
        "gain",
        *(("outcome",) if finished is not None else ()),
    ):
        table.add_column(column)
    for m in moves:
        done = outcome.get(_key(m))
        row = [
            markup(f"{m.process_guid}/{m.index}"),
            markup(f"{m.from_cell} ({m.from_zone})"),
            markup(f"{m.to_cell} ({m.to_zone})"),
            markup(f"{m.reason}: {m.detail}"),
            f"{m.gain:g}",
        ]
        if finished is not None:
            row.append(
                "still running"
                if done is None
                else markup(f"{done.outcome}" + (f": {done.why}" if done.why and _worth_saying(done) else ""))
            )
        table.add_row(*row)
    console().print(table)
