"""`vendue tokens create|list|revoke`: bearer tokens for people and scripts (docs/security.md).

A token stands for the admin or the reader role, never for a component. The BBS keeps only its
SHA-256: `create` prints the secret once. The BBS is found as every client command finds it
(`--bbs`, VENDUE_BBS_URL, the local cluster in `--data-dir`, the default), as its admin (`--tls-*`, or the
local cluster's admin certificate; or an admin's `--token`). Bad input is one `error:`
line and exit 2; a BBS that refuses or is unreachable, exit 1.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from common.models import TOKEN_ROLES, TokenCreate

from .bbs_client import NotFound
from .cli import app
from .client_cmd import (
    USAGE_ERROR,
    AsJson,
    Connection,
    OneLineErrorsCommand,
    OneLineErrorsGroup,
    bbs_command,
    connect,
    console,
    fail,
    listing_table,
    print_json,
    report_done,
    validated,
)
from .terminal_text import echo, markup

tokens_app = typer.Typer(help="Bearer tokens for people and scripts (admin or reader).", no_args_is_help=True,
                         cls=OneLineErrorsGroup)
app.add_typer(tokens_app, name="tokens")

# A token forgotten in a script or a CI secret stops working on its own; `--expires never` says otherwise.
DEFAULT_EXPIRY = "90d"
UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")


def parse_duration(text: str) -> float:
    """'90', '90s', '15m', '12h', '30d' -> seconds; ValueError naming what is accepted."""
    found = _DURATION.match(text.strip().lower())
    if found is None:
        raise ValueError(f"expected a duration like 12h, 30d, a number of seconds or never, got {text!r}")
    return float(found.group(1)) * UNITS_S[found.group(2) or "s"]


def _when(epoch: float | None) -> str:
    return "never" if epoch is None else datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@tokens_app.command("create", cls=OneLineErrorsCommand)
@bbs_command
def create(
    role: Annotated[str, typer.Option("--role", metavar="ROLE", help=f"One of: {', '.join(TOKEN_ROLES)}.")],
    name: Annotated[str, typer.Option("--name", help="Whom it is for (shown in lists and logs).")] = "",
    expires: Annotated[
        str,
        typer.Option(
            "--expires", metavar="DURATION",
            help=f"Lifetime: 12h, 30d, seconds, or never (until revoked); default {DEFAULT_EXPIRY}."
        ),
    ] = DEFAULT_EXPIRY,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Create a token and print it: it is shown this once (the BBS keeps only its hash)."""
    expires_in_s = None
    if expires.strip().lower() != "never":
        try:
            expires_in_s = parse_duration(expires)
        except ValueError as exc:
            fail(f"--expires: {exc}", USAGE_ERROR)
    request = validated(TokenCreate, role=role, name=name, expires_in_s=expires_in_s)
    with connect(connection) as client:
        created = client.create_token(request)
    if as_json:
        print_json({"token": created.token, "id": created.id, "role": created.role, "name": created.name,
                    "expires_at": created.expires_at})
        return
    sys.stdout.write(created.token + "\n")
    echo(f"token {created.id} (role {created.role}, expires {_when(created.expires_at)}): shown once, "
         "keep it now; use it as `Authorization: Bearer <token>`", err=True)


@tokens_app.command("list", cls=OneLineErrorsCommand)
@bbs_command
def list_tokens(
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Every token: id, role, purpose, name, created, expires, revoked (never a secret)."""
    with connect(connection) as client:
        found = client.tokens()
    if as_json:
        print_json([t.model_dump(mode="json") for t in found])
        return
    table = listing_table(f"{len(found)} token(s)")
    for column in ("ID", "ROLE", "PURPOSE", "NAME", "CREATED", "EXPIRES", "REVOKED"):
        table.add_column(column, no_wrap=True)
    for t in found:
        table.add_row(markup(t.id), markup(t.role), markup(t.purpose), markup(t.name or "-"),
                      _when(t.created_at), _when(t.expires_at),
                      "[red]revoked[/]" if t.revoked else "")
    console().print(table)


@tokens_app.command("revoke", cls=OneLineErrorsCommand)
@bbs_command
def revoke(
    token_id: Annotated[str, typer.Argument(metavar="ID", help="The token's id (vendue tokens list).")],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Revoke a token: every request carrying it is refused from now on."""
    with connect(connection) as client:
        try:
            client.revoke_token(token_id)
        except NotFound:
            fail(f"no token with id {token_id!r}")
    report_done(as_json, f"revoked {token_id}", id=token_id, revoked=True)
