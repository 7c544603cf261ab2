"""The local cluster's certificates and keys: the cluster CA in <data-dir>/certs/ (mode 0700; made once and
kept across runs), a certificate per component issued at each start, the admin's (the CLI's and the
launcher's own), the embedded NATS server's users, and the BBS's key ring for encryption at rest
(<data-dir>/bbs-keys.json, mode 0600, made once and kept). docs/security.md says what each is for.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

from common.tls import CA_CERT, CertError, TLSFiles, init_ca, issue, write_private
from common.transport.nats_server import NatsServer, certificate_identities, issue_server_certificate

from .cluster_topology import ClusterError, Component, is_bbs

CERTS_DIR = "certs"
# The CLI's certificate, and the launcher's own (role admin).
ADMIN_CERT = "admin"
KEYS_FILE = "bbs-keys.json"  # the BBS's key ring (encryption at rest), in the data dir


def admin_tls(certs_dir: Path, insecure: bool) -> TLSFiles | None:
    """The admin certificate the CLI and the launcher use (None: an insecure cluster)."""
    return None if insecure else TLSFiles.in_dir(certs_dir, ADMIN_CERT)


def make_certificates(certs_dir: Path, components: Iterable[Component],
                      sans: Callable[[str], list[str]]) -> None:
    """The CA (once, kept across runs) and a certificate for every component and the admin, in `certs_dir`
    (0700). `sans(name)`: the addresses a component's certificate names besides loopback."""
    certs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    certs_dir.chmod(0o700)  # also when it was there already
    try:
        if not (certs_dir / CA_CERT).exists():
            init_ca(certs_dir)
        issue(certs_dir, role="admin", name=ADMIN_CERT)
        for component in components:
            names = sans(component.name)
            if not component.cells:
                issue(certs_dir, role="bbs" if is_bbs(component.name) else "auctioneer",
                      name=component.name, sans=names)
            elif component.cell_prefix:
                issue(certs_dir, role="rep", name=component.name, cell_prefixes=[component.cell_prefix],
                      sans=names)
            else:
                issue(certs_dir, role="rep", name=component.name,
                      cells=[cell_id for cell_id, _ in component.cells], sans=names)
    except CertError as exc:
        raise ClusterError(f"cannot make the certificates in {certs_dir}: {exc}") from None


def security_args(certs_dir: Path, name: str, insecure: bool) -> list[str]:
    """Component `name`'s security flags: its certificate, or --insecure."""
    if insecure:
        return ["--insecure"]
    files = TLSFiles.in_dir(certs_dir, name)
    return ["--tls-cert", str(files.cert), "--tls-key", str(files.key), "--tls-ca", str(files.ca)]


def make_key_ring(data_dir: Path) -> None:
    """The BBS's key ring, made once (0600 from the start) and kept: a new one would lock the BBS out of
    what the old one sealed."""
    from bbs.encryption import new_key_ring_json  # loaded by the launcher only, not by every CLI command

    path = data_dir / KEYS_FILE
    if not path.exists():
        write_private(path, new_key_ring_json().encode())


def key_ring_env(data_dir: Path, component: Component) -> dict[str, str]:
    """Where a BBS finds its key ring: in its environment, not on its command line (`ps` shows those)."""
    if is_bbs(component.name):
        return {"VENDUE_ENCRYPTION_KEYS_FILE": str(data_dir / KEYS_FILE)}
    return {}


def nats_server(certs_dir: Path, insecure: bool, host: str, sans: list[str],
                log_path: Path) -> tuple[NatsServer, str]:
    """The embedded nats-server's configuration, and its token ("" with TLS). With TLS (docs/security.md,
    "NATS"): its own certificate from the cluster CA, and one user per certificate in the certs dir, with
    its role's permissions; every component connects with its certificate. Insecure: a random token, handed
    to the children as VENDUE_NATS_TOKEN."""
    if insecure:
        token = secrets.token_urlsafe(16)
        return NatsServer(host=host, token=token, log_path=log_path), token
    try:
        server_files = issue_server_certificate(certs_dir, sans=sans)
    except CertError as exc:
        raise ClusterError(f"cannot make the NATS server's certificate in {certs_dir}: {exc}") from None
    return NatsServer(host=host, tls=server_files, users=certificate_identities(certs_dir),
                      log_path=log_path), ""
