"""`vendue certs init DIR`, `vendue certs issue DIR ...`: the cluster CA and the certificates it signs;
`vendue certs nats-config DIR`: an external nats-server's configuration admitting those certificates.

A certificate states its holder's role (bbs, auctioneer, rep, admin, reader) and, for a rep, the cells it
may speak for (common/tls.py). Keys are written with mode 0600. Bad input is one `error:` line, exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from common.config_check import host_problem
from common.tls import CA_CERT, CA_KEY, ROLES, CertError, TLSFiles, init_ca, issue

from .cli import app
from .cli_style import OneLineErrorsCommand, OneLineErrorsGroup, bad_input

certs = typer.Typer(
    help="The cluster CA and the certificates it issues (mutual TLS between every component).",
    no_args_is_help=True,
    cls=OneLineErrorsGroup,
)
app.add_typer(certs, name="certs")


@certs.command("init", cls=OneLineErrorsCommand)
def certs_init(
    directory: Annotated[Path, typer.Argument(metavar="DIR", help="Where to write ca.pem and ca-key.pem.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the paths as JSON.")] = False,
) -> None:
    """Write a new cluster CA into DIR (ca.pem, and ca-key.pem readable by its owner only)."""
    try:
        cert = init_ca(directory)
    except (CertError, OSError) as exc:
        bad_input(str(exc))
    key = cert.with_name(CA_KEY)
    if json_out:
        typer.echo(json.dumps({"ca": str(cert), "ca_key": str(key)}))
    else:
        typer.echo(f"CA written: {cert} (key {key}, mode 0600)")


@certs.command("issue", cls=OneLineErrorsCommand)
def certs_issue(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="The CA's directory; NAME.pem goes there too.")
    ],
    role: Annotated[str, typer.Option("--role", metavar="ROLE", help=f"One of: {', '.join(ROLES)}.")],
    name: Annotated[
        str, typer.Option("--name", metavar="NAME", help="Who holds it: NAME.pem, NAME-key.pem.")
    ],
    cells: Annotated[
        list[str], typer.Option("--cell", metavar="ID", help="A cell this rep may speak for (repeat).")
    ] = [],  # noqa: B006
    cell_prefixes: Annotated[
        list[str],
        typer.Option(
            "--cell-prefix", metavar="PREFIX", help="Every cell whose id starts with PREFIX (a sim host)."
        ),
    ] = [],  # noqa: B006
    sans: Annotated[
        list[str],
        typer.Option(
            "--san",
            metavar="HOST",
            help="A DNS name or IP it serves on (repeat; localhost and 127.0.0.1 are always in).",
        ),
    ] = [],  # noqa: B006
    days: Annotated[int, typer.Option("--days", min=1, max=3650, help="Validity.")] = 825,
    json_out: Annotated[bool, typer.Option("--json", help="Print the paths as JSON.")] = False,
) -> None:
    """Issue NAME.pem / NAME-key.pem for ROLE, signed by the CA in DIR."""
    if role == "rep" and not cells and not cell_prefixes:
        bad_input("cell: a rep certificate names the cells it speaks for (--cell ID or --cell-prefix PREFIX)")
    try:
        cert, key = issue(directory, role=role, name=name, cells=cells, cell_prefixes=cell_prefixes,
                          sans=sans, days=days)
    except (CertError, OSError) as exc:
        bad_input(str(exc))
    if json_out:
        typer.echo(json.dumps({"cert": str(cert), "key": str(key), "role": role, "name": name}))
    else:
        typer.echo(f"{role} certificate for {name}: {cert} (key {key}, mode 0600)")


DEFAULT_NATS_LISTEN = "0.0.0.0:4222"  # nats-server's own default: every client is a certificate of the CA


def _listen_address(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::]:4222` for IPv6) -> (host, port); one `error: --listen (listen): ...` line
    otherwise."""
    host, sep, port = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        bad_input(f"listen: expected HOST:PORT with a port from 1 to 65535, got {listen!r}")
    problem = host_problem("listen", host)
    if problem is not None:
        bad_input(problem)
    return host, int(port)


def _missing_sans(cert: Path, sans: list[str]) -> list[str]:
    """Which of `sans` the existing certificate does not name (DNS names and IP addresses)."""
    import ipaddress

    from cryptography import x509

    names = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    stated = {*names.get_values_for_type(x509.DNSName), *map(str, names.get_values_for_type(x509.IPAddress))}
    missing = []
    for san in sans:
        try:
            san = str(ipaddress.ip_address(san))
        except ValueError:
            pass
        if san not in stated:
            missing.append(san)
    return missing


@certs.command("nats-config", cls=OneLineErrorsCommand)
def certs_nats_config(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="The CA's directory and the certificates to admit.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Where to write it (default: DIR/nats-server.conf)."),
    ] = None,
    listen: Annotated[
        str, typer.Option("--listen", metavar="HOST:PORT", help="The address the server takes clients on.")
    ] = DEFAULT_NATS_LISTEN,
    sans: Annotated[
        list[str],
        typer.Option(
            "--san",
            metavar="HOST",
            help="A name the components dial the server by, for its certificate when it is issued (repeat).",
        ),
    ] = [],  # noqa: B006
    json_out: Annotated[bool, typer.Option("--json", help="Print the paths and users as JSON.")] = False,
) -> None:
    """Write the nats-server configuration for the certificates in DIR (docs/security.md, "NATS"): TLS with
    the server's own certificate (DIR/nats.pem, issued when missing), a TLS-first handshake, and one user
    per client certificate with its role's permissions. Start the server with `nats-server -c FILE`; run
    this again after issuing a certificate, then reload the server (SIGHUP)."""
    from common.transport.nats_server import (
        CONFIG_FILE,
        SERVER_CERT_NAME,
        certificate_identities,
        issue_server_certificate,
        server_config,
        write_config,
    )

    host, port = _listen_address(listen)
    path = out if out is not None else directory / CONFIG_FILE
    tls = TLSFiles.in_dir(directory, SERVER_CERT_NAME)
    if not (directory / CA_CERT).is_file():  # the server trusts it for every client
        bad_input(f"{directory}: no CA there ({CA_CERT}); run `vendue certs init {directory}` and issue "
                  "certificates")
    try:
        users = certificate_identities(directory)  # the server's own is serving-only: never one of them
        if not users:
            bad_input(f"{directory}: no client certificates to admit; issue them first (vendue certs issue)")
        if not tls.cert.exists():
            issue_server_certificate(directory, sans=sans)
        elif missing := _missing_sans(tls.cert, sans):
            bad_input(f"san: {tls.cert} does not name {', '.join(missing)}; remove it and {tls.key.name} to "
                      "issue a new one")
        write_config(path, server_config(host=host, port=port, tls=tls, users=users))
    except (CertError, OSError) as exc:
        bad_input(str(exc))
    if json_out:
        typer.echo(json.dumps({"config": str(path), "cert": str(tls.cert), "key": str(tls.key),
                               "users": [f"{u.role} {u.name}" for u in users]}))
    else:
        typer.echo(f"NATS configuration written: {path} (mode 0600; users: {len(users)}; server certificate "
                   f"{tls.cert})")
