"""The flags of every component command (`vendue bbs|auctioneer|rep`) that say who it is on the network
(docs/security.md): its certificate, its key and the cluster CA, or `--insecure`.

Each overrides the VENDUE_TLS_CERT, VENDUE_TLS_KEY, VENDUE_TLS_CA or VENDUE_INSECURE its settings read
(common.tls.TLSOptions); `tls_settings` turns the flags into those settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer


def tls_cert_flag(role: str) -> Any:
    return typer.Option(
        None, "--tls-cert", help=f"Its certificate (vendue certs issue --role {role}) [VENDUE_TLS_CERT]."
    )


TLS_KEY_FLAG: Any = typer.Option(None, "--tls-key", help="The certificate's private key [VENDUE_TLS_KEY].")
TLS_CA_FLAG: Any = typer.Option(None, "--tls-ca", help="The cluster CA certificate, ca.pem [VENDUE_TLS_CA].")
INSECURE_FLAG: Any = typer.Option(
    False,
    "--insecure",
    help="Plain HTTP, authorization off, on any address: anyone who reaches it controls it "
    "[VENDUE_INSECURE].",
)


LOG_FORMAT_FLAG: Any = typer.Option(
    None, "--log-format",
    help="json (one object per line) or console (for a terminal) [VENDUE_LOG_FORMAT; console on a terminal, "
    "else json].")


def tls_settings(tls_cert: Path | None, tls_key: Path | None, tls_ca: Path | None,
                 insecure: bool) -> dict[str, Any]:
    """The flags as settings, None where a flag was not given: then the environment decides (no
    `--insecure` is not `insecure=False`, which would override VENDUE_INSECURE=1)."""
    return {"tls_cert": tls_cert, "tls_key": tls_key, "tls_ca": tls_ca, "insecure": insecure or None}
