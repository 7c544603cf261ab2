"""`vendue blobs list|delete`: the cluster's blob store (docs/artifacts.md), as its admin.

`list` shows each blob's digest (shortened in the table: the full one is in `--json`), size, age, when a
definition last named it, and which desired LRPs and tasks name it now (those keep it from the garbage
collection, and `delete` is refused for them). `delete` takes a digest or a unique prefix of one, as `list`
shows it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .cli import app
from .client_cmd import (
    USAGE_ERROR,
    AsJson,
    Connection,
    OneLineErrorsCommand,
    OneLineErrorsGroup,
    age,
    bbs_command,
    connect,
    console,
    fail,
    listing_table,
    print_json,
    report_done,
)
from .terminal_text import markup

if TYPE_CHECKING:
    from rich.table import Table

blobs_app = typer.Typer(help="The cluster's blob store: what `push --path` uploaded.", no_args_is_help=True,
                        cls=OneLineErrorsGroup)
app.add_typer(blobs_app, name="blobs")

SHOWN_HEX = 12  # of a digest, in the table: enough to tell blobs apart, and `delete` takes it
FULL_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
DIGEST_PREFIX = re.compile(r"^(sha256:)?[0-9a-f]{1,64}$")


def short(digest: str) -> str:
    return digest[: len("sha256:") + SHOWN_HEX]


def human_size(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    value = size / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def _moment(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


@blobs_app.command("list", cls=OneLineErrorsCommand)
@bbs_command
def blobs_list(
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Every blob: digest, size, created, last named, and the desired LRPs and tasks that name it now."""
    with connect(connection) as client:
        listed = client.blobs()
    if as_json:
        print_json(listed)
        return
    console().print(blobs_table(listed, datetime.now(UTC)))


def blobs_table(listed: list[dict[str, Any]], now: datetime) -> Table:
    """The listing for people: 80 columns are enough (the digest shortened, the names folded)."""
    table = listing_table(f"{len(listed)} blob(s), {human_size(sum(b['size'] for b in listed))}")
    table.add_column("DIGEST", no_wrap=True)
    table.add_column("SIZE", no_wrap=True, justify="right")
    table.add_column("CREATED", no_wrap=True)
    table.add_column("LAST NAMED", no_wrap=True)
    table.add_column("REFERENCED BY", overflow="fold")
    for blob in listed:
        named = blob.get("referenced_by") or []
        table.add_row(markup(short(blob["digest"])), human_size(blob["size"]),
                      age(_moment(blob["created_at"]), now), age(_moment(blob["last_referenced_at"]), now),
                      markup("\n".join(named)) if named else "[dim]-[/]")  # one per line
    return table


def resolve_digest(given: str, listed: list[dict[str, Any]]) -> str:
    """The one stored digest `given` (a digest, or a prefix of one, with or without `sha256:`) names."""
    wanted = given if given.startswith("sha256:") else f"sha256:{given}"
    found = [blob["digest"] for blob in listed if blob["digest"].startswith(wanted)]
    if not found:
        fail(f"no blob {given!r} in the store (see `vendue blobs list`)")
    if len(found) > 1:
        fail(f"DIGEST: {given!r} names {len(found)} blobs ({', '.join(short(d) for d in found[:3])}, ...): "
             "give more of it", USAGE_ERROR)
    return str(found[0])


@blobs_app.command("delete", cls=OneLineErrorsCommand)
@bbs_command
def blobs_delete(
    digest: Annotated[str, typer.Argument(help="sha256:HEX, or a unique prefix of it (as `list` shows).",
                                          show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Remove a blob from the store; refused while a desired LRP or task names it."""
    from .bbs_client import Conflict, NotFound

    given = digest.strip().lower()
    if not DIGEST_PREFIX.match(given):
        fail(f"DIGEST: expected sha256:HEX (64 hex digits, or a unique prefix of them), got {digest!r}",
             USAGE_ERROR)
    with connect(connection) as client:
        full = given if FULL_DIGEST.match(given) else resolve_digest(given, client.blobs())
        try:
            client.delete_blob(full)
        except NotFound:
            fail(f"no blob {full} in the store (see `vendue blobs list`)")
        except Conflict as exc:
            fail(f"{full} is in use: {exc}")
    report_done(as_json, f"deleted {full}", digest=full, deleted=True)
