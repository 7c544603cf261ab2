"""The cluster's identities: one CA, a certificate per component, person or script, TLS contexts from them.

    init_ca(dir)                                   ca.pem, ca-key.pem (0600)
    issue(dir, role="rep", name="cell-1", cells=["cell-1"])   cell-1.pem, cell-1-key.pem (0600)

What a certificate says (ECDSA P-256, signed by the cluster CA):
- subject `O=vendue, OU=<role>, CN=<name>`: the role is one of ROLES; the name is who it is (a cell, a
  host, a person);
- URI SANs `urn:vendue:cell:<cell_id>` for each cell a rep may speak for, `urn:vendue:cell-prefix:<p>` for
  a simulated host whose cells all start with <p>;
- DNS/IP SANs for the addresses it serves on (`localhost` and 127.0.0.1 always; `--san` adds more);
- extended key usage serverAuth and clientAuth: every component is both (it serves, and it calls others).
  `issue(..., client_auth=False)` makes a serving-only one (the NATS server's: it is no caller).

Every component serves HTTPS with its certificate and asks each caller for one (CERT_OPTIONAL: people and
scripts may come with a bearer token instead, common/auth.py); a certificate that the cluster CA did not
sign fails the handshake. Clients always present their own certificate.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

# cf: Cloud Foundry's components (Cloud Controller, cfdot, ...) on the BBS's Diego API (bbs/diego).
ROLES = ("bbs", "auctioneer", "rep", "admin", "reader", "cf")
# The role of a NATS server's certificate on its cluster's routes (common/transport/nats_server.py): routes
# are mutual TLS, so it is a client certificate, but no identity of ours: `identity_from_der` finds none
# in it, so no HTTPS service of ours and no NATS user (certificate_identities) takes it from a caller.
NATS_ROUTE_ROLE = "nats-route"
CA_CERT = "ca.pem"
CA_KEY = "ca-key.pem"
CELL_URI = "urn:vendue:cell:"
CELL_PREFIX_URI = "urn:vendue:cell-prefix:"
ORGANIZATION = "vendue"
CA_DAYS = 3650
LEAF_DAYS = 825  # the longest validity clients (browsers, macOS) still accept for a server certificate


class CertError(ValueError):
    """A certificate or key that cannot be made, read or used (reported as one line)."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a caller is: from its client certificate, or from a bearer token (people and scripts)."""

    role: str
    name: str
    cells: frozenset[str] = frozenset()
    cell_prefixes: tuple[str, ...] = ()
    via: str = "certificate"  # or "token", or "insecure" (authorization off)

    def speaks_for(self, cell_id: str) -> bool:
        """May this caller report for `cell_id`? Only a rep, only for the cells in its certificate."""
        if self.role != "rep":
            return False
        return cell_id in self.cells or any(cell_id.startswith(p) for p in self.cell_prefixes)

    def describe(self) -> str:
        return f"{self.role} {self.name!r}"


# --- making certificates ----------------------------------------------------------------------------


def _paths(directory: Path, name: str) -> tuple[Path, Path]:
    return directory / f"{name}.pem", directory / f"{name}-key.pem"


def write_private(path: Path, pem: bytes) -> None:
    """Written with mode 0600 from the start: never readable by others, not even for a moment (keys, and
    the NATS server's configuration, which names every identity)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT


def init_ca(directory: Path, *, common_name: str = "vendue cluster CA", days: int = CA_DAYS) -> Path:
    """Write a new cluster CA (`ca.pem`, `ca-key.pem`) into `directory`; refuses to overwrite one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if cert_path.exists() or key_path.exists():
        raise CertError(f"{directory}: a CA is already there ({CA_CERT}); remove it first to make a new one")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # a little slack for clocks that differ
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_pair(cert_path, key_path, cert, key)
    return cert_path


def issue(
    directory: Path,
    *,
    role: str,
    name: str,
    cells: Iterable[str] = (),
    cell_prefixes: Iterable[str] = (),
    sans: Iterable[str] = (),
    days: int = LEAF_DAYS,
    client_auth: bool = True,
) -> tuple[Path, Path]:
    """Issue `<name>.pem` and `<name>-key.pem` in `directory`, signed by the CA there.

    `client_auth=False` makes a serving-only certificate (extended key usage serverAuth alone): TLS
    refuses it as a client certificate, so whoever holds it cannot call anything as its role. For a
    server that is no identity of ours (the NATS server, common/transport/nats_server.py)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    directory = Path(directory)
    if role not in ROLES and role != NATS_ROUTE_ROLE:
        raise CertError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    if not name or "/" in name or name.startswith(".") or name in ("ca", "ca-key"):
        raise CertError(f"name: {name!r} cannot name a certificate file")
    cells, cell_prefixes = list(cells), list(cell_prefixes)
    if (cells or cell_prefixes) and role != "rep":
        raise CertError("cell: only a rep certificate names cells")
    ca_cert, ca_key = _load_ca(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = subject_name(role, name)
    alt_names: list[x509.GeneralName] = [
        x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    for san in sans:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            alt_names.append(x509.DNSName(san))
    alt_names += [x509.UniformResourceIdentifier(CELL_URI + c) for c in cells]
    alt_names += [x509.UniformResourceIdentifier(CELL_PREFIX_URI + p) for p in cell_prefixes]
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(min(now + dt.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(key_agreement=True), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client_auth else [])
            ),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = _paths(directory, name)
    _write_pair(cert_path, key_path, cert, key)
    return cert_path, key_path


def _key_usage(*, key_cert_sign: bool = False, crl_sign: bool = False, key_agreement: bool = False):
    """x509.KeyUsage: digital signatures, and what else the certificate is for (a CA signs certificates
    and CRLs; a leaf agrees keys)."""
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True, key_cert_sign=key_cert_sign, crl_sign=crl_sign, key_agreement=key_agreement,
        content_commitment=False, key_encipherment=False, data_encipherment=False, encipher_only=False,
        decipher_only=False,
    )


def _write_pair(cert_path: Path, key_path: Path, cert, key) -> None:  # (Certificate, PrivateKey)
    """The key first (0600, PKCS#8, unencrypted: components start unattended), then the certificate."""
    from cryptography.hazmat.primitives import serialization

    write_private(key_path, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def subject_name(role: str, name: str):  # -> x509.Name
    """The subject every certificate states: `O=vendue, OU=<role>, CN=<name>` (RFC 4514 string:
    `subject_name(...).rfc4514_string()`, what nats-server's verify_and_map matches users against)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
        x509.NameAttribute(NameOID.COMMON_NAME, name),
    ])


def _load_ca(directory: Path):  # -> (Certificate, PrivateKey)
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate((directory / CA_CERT).read_bytes())
        key = serialization.load_pem_private_key((directory / CA_KEY).read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise CertError(
            f"{directory}: no CA there ({exc.filename}); run `vendue certs init {directory}`"
        ) from None
    except ValueError as exc:
        raise CertError(f"{directory}: the CA cannot be read: {exc}") from None
    return cert, key


# --- reading identities -----------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def identity_from_der(der: bytes) -> Identity | None:
    """The identity a (verified) client certificate states; None when it states no role we know.
    Cached: a connection presents the same certificate on every request."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    roles = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(roles) != 1 or roles[0].value not in ROLES or not names:
        return None
    cells: set[str] = set()
    prefixes: list[str] = []
    try:
        uris = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.UniformResourceIdentifier
        )
    except x509.ExtensionNotFound:
        uris = []
    for uri in uris:
        if uri.startswith(CELL_URI):
            cells.add(uri[len(CELL_URI):])
        elif uri.startswith(CELL_PREFIX_URI):
            prefixes.append(uri[len(CELL_PREFIX_URI):])
    return Identity(str(roles[0].value), str(names[0].value), frozenset(cells), tuple(prefixes))


def identity_of_file(cert_path: Path) -> Identity | None:
    """The identity a certificate file states (the CLI shows whom it acts as)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    return identity_from_der(cert.public_bytes(serialization.Encoding.DER))


def rep_refusal(der: bytes | None, cells: Iterable[str]) -> str | None:
    """Why a server that presented the certificate `der` (None: none) is not the rep of every one of
    `cells`, or None when it is. The BBS and the auctioneer check it on every connection to a rep: a
    rep_url is whatever the rep heartbeated, and must not lead them (presenting their own certificates)
    to another service or another cell's rep."""
    identity = identity_from_der(der) if der else None
    if identity is None:
        return "the server presented no certificate stating a Vendue role"
    if identity.role != "rep":
        return f"the server's certificate is {identity.describe()}, not a rep's"
    for cell_id in cells:
        if not identity.speaks_for(cell_id):
            return f"the server's certificate ({identity.describe()}) does not name cell {cell_id!r}"
    return None


def peer_rep_refusal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None, cells: Iterable[str]) -> str | None:
    """rep_refusal for the server at the other end of a connection; None for a plain-HTTP one, where this
    side presents no certificate to be borrowed (an insecure cluster's)."""
    if ssl_object is None:
        return None
    return rep_refusal(ssl_object.getpeercert(binary_form=True), cells)


# --- TLS contexts -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """A component's certificate, its key and the cluster CA."""

    cert: Path
    key: Path
    ca: Path

    @classmethod
    def in_dir(cls, directory: Path, name: str) -> TLSFiles:
        """`<name>.pem`, `<name>-key.pem` and `ca.pem` in `directory` (what `vendue up` writes)."""
        cert, key = _paths(Path(directory), name)
        return cls(cert, key, Path(directory) / CA_CERT)

    @classmethod
    def from_settings(cls, cert: Path | None, key: Path | None, ca: Path | None) -> TLSFiles | None:
        """The three flags together, or none of them (None: TLS off); one or two alone is an error."""
        given = [p for p in (cert, key, ca) if p is not None]
        if not given:
            return None
        if len(given) != 3:
            missing = [flag for flag, p in (("tls_cert", cert), ("tls_key", key), ("tls_ca", ca))
                       if p is None]
            raise CertError(f"{missing[0]}: --tls-cert, --tls-key and --tls-ca go together")
        for flag, path in (("tls_cert", cert), ("tls_key", key), ("tls_ca", ca)):
            if not Path(path).is_file():  # type: ignore[arg-type]
                raise CertError(f"{flag}: no such file {path}")
        return cls(Path(cert), Path(key), Path(ca))  # type: ignore[arg-type]

    def identity(self) -> Identity | None:
        return identity_of_file(self.cert)


def _harden(context: ssl.SSLContext) -> ssl.SSLContext:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def server_context(files: TLSFiles) -> ssl.SSLContext:
    """Serve with our certificate; ask every caller for one from the cluster CA (optional: a caller with
    a bearer token and no certificate finishes the handshake; one with a certificate the CA did not sign
    does not)."""
    context = _harden(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(files.ca)))
    _load_own(context, files)
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


def client_context(files: TLSFiles | None = None, *, ca: Path | None = None) -> ssl.SSLContext:
    """Trust only the cluster CA, and present our certificate (when given: a person with a token has none)."""
    cafile = files.ca if files is not None else ca
    context = _harden(
        ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(cafile) if cafile else None)
    )
    if files is not None:
        _load_own(context, files)
    return context


def _load_own(context: ssl.SSLContext, files: TLSFiles) -> None:
    """The certificate and key this side presents; CertError (naming tls_cert) when they do not load."""
    try:
        context.load_cert_chain(str(files.cert), str(files.key))
    except (ssl.SSLError, OSError) as exc:
        raise CertError(f"tls_cert: cannot load {files.cert} with {files.key}: {exc}") from None


def is_loopback(host: str) -> bool:
    """Is `host` (a listen address) loopback only? 'localhost' is; 0.0.0.0 and any name are not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# --- settings every component shares ----------------------------------------------------------------


class TLSOptions(BaseModel):
    """Mixed into every component's settings: `--tls-cert/--tls-key/--tls-ca` (`VENDUE_TLS_CERT`, ...) and
    `--insecure` (`VENDUE_INSECURE`)."""

    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    insecure: bool = False

    def serving_files(self, listen: str) -> TLSFiles | None:
        return serving_files(self.tls_cert, self.tls_key, self.tls_ca, insecure=self.insecure, listen=listen)

    def client_files(self) -> TLSFiles | None:
        """The certificate this component presents when it calls another (None when insecure)."""
        return None if self.insecure else TLSFiles.from_settings(self.tls_cert, self.tls_key, self.tls_ca)


class InsecureRefused(CertError):
    """Plain HTTP on an address other hosts can reach, without `--insecure`."""


def serving_files(tls_cert: Path | None, tls_key: Path | None, tls_ca: Path | None, *, insecure: bool,
                  listen: str) -> TLSFiles | None:
    """What a component serves with: its TLS files (HTTPS, authorization on), or None (plain HTTP,
    authorization off: only with --insecure, or with no TLS files on a loopback address).

    Raises CertError (one line naming the setting) for half-given files, and InsecureRefused for plain
    HTTP on a non-loopback address without --insecure."""
    if insecure:
        return None
    files = TLSFiles.from_settings(tls_cert, tls_key, tls_ca)
    if files is None and not is_loopback(listen):
        raise InsecureRefused(
            f"tls_cert: refusing to serve plain HTTP on {listen} without TLS: give --tls-cert, --tls-key and "
            "--tls-ca (vendue certs issue), or --insecure to run without authentication"
        )
    return files


INSECURE_WARNING = ("INSECURE: TLS and authorization are off; anyone who can reach this process can "
                    "control it (--insecure, or no --tls-* flags on loopback)")
