"""`vendue certs init DIR` and `vendue certs issue DIR ...`: the cluster CA and the certificates it signs.

A certificate states its holder's role (bbs, auctioneer, rep, admin, reader) and, for a rep, the cells it
may speak for (common/tls.py). Keys are written with mode 0600. Bad input is one `error:` line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from common.tls import ROLES, CertError, init_ca, issue

from .cli import app

certs = typer.Typer(help="The cluster CA and the certificates it issues (mutual TLS between every component).",
                    no_args_is_help=True)
app.add_typer(certs, name="certs")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@certs.command("init")
def certs_init(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write ca.pem and ca-key.pem.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the paths as JSON.")] = False,
) -> None:
    """Write a new cluster CA into DIR (ca.pem, and ca-key.pem readable by its owner only)."""
    try:
        cert = init_ca(directory)
    except (CertError, OSError) as exc:
        _fail(str(exc))
    if json_out:
        typer.echo(json.dumps({"ca": str(cert), "ca_key": str(cert.with_name("ca-key.pem"))}))
    else:
        typer.echo(f"CA written: {cert} (key {cert.with_name('ca-key.pem')}, mode 0600)")


@certs.command("issue")
def certs_issue(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="The CA's directory; NAME.pem goes there too.")],
    role: Annotated[str, typer.Option("--role", metavar="ROLE", help=f"One of: {', '.join(ROLES)}.")],
    name: Annotated[str, typer.Option("--name", metavar="NAME", help="Who holds it: NAME.pem, NAME-key.pem.")],
    cells: Annotated[list[str], typer.Option("--cell", metavar="ID",
                                             help="A cell this rep may speak for (repeat).")] = [],  # noqa: B006
    cell_prefixes: Annotated[list[str], typer.Option("--cell-prefix", metavar="PREFIX",
                                                     help="Every cell whose id starts with PREFIX (a sim host).")] = [],  # noqa: B006
    sans: Annotated[list[str], typer.Option("--san", metavar="HOST",
                                            help="A DNS name or IP it serves on (repeat; localhost and "
                                                 "127.0.0.1 are always in).")] = [],  # noqa: B006
    days: Annotated[int, typer.Option("--days", min=1, max=3650, help="Validity.")] = 825,
    json_out: Annotated[bool, typer.Option("--json", help="Print the paths as JSON.")] = False,
) -> None:
    """Issue NAME.pem / NAME-key.pem for ROLE, signed by the CA in DIR."""
    if role == "rep" and not cells and not cell_prefixes:
        _fail("cell: a rep certificate names the cells it speaks for (--cell ID or --cell-prefix PREFIX)")
    try:
        cert, key = issue(directory, role=role, name=name, cells=cells, cell_prefixes=cell_prefixes,
                          sans=sans, days=days)
    except (CertError, OSError) as exc:
        _fail(str(exc))
    if json_out:
        typer.echo(json.dumps({"cert": str(cert), "key": str(key), "role": role, "name": name}))
    else:
        typer.echo(f"{role} certificate for {name}: {cert} (key {key}, mode 0600)")
