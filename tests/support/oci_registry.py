"""A real OCI registry for tests: Debian's `docker-registry` (the distribution project's registry) on
loopback, storage in a temporary directory, optionally with TLS (a CA the test makes) and htpasswd basic
auth; images built from busybox-static with umoci into an OCI layout and pushed with skopeo. No Docker and
nothing beyond loopback.

    with oci_registry(tmp_path, tls=True, users={"alice": "s3cret"}) as registry:
        layout = build_image(tmp_path / "layout", "web", **HTTPD_IMAGE)
        digest = registry.push(layout, "web", "team/web", "1")
        registry.move_tag("team/web", "latest", digest)

`registry.host` ("127.0.0.1:PORT") is what an image ref starts with; `registry.ca` the CA's certificate
when `tls` (for `--registry-ca`), else the registry is plain HTTP (for `--insecure-registry registry.host`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from common.procutil import free_port, terminate_then_kill

REGISTRY_BINARY = "/usr/bin/docker-registry"
BUSYBOX = "/usr/bin/busybox"

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))

# An image whose entrypoint serves HTTP on $PORT with busybox's httpd: GET / answers its index.html, whose
# text is `INDEX_TEXT` (or the `index` given to build_image). Its config fills a definition's command,
# env, working dir, user and port (the BBS's fill-in) and the container executor can run it.
INDEX_TEXT = "hello from an image\n"
HTTPD_IMAGE: dict[str, Any] = {
    "entrypoint": ["/bin/sh", "-c"],
    "cmd": ['echo "$GREETING" > /tmp/greeting; exec httpd -f -p "${PORT:-8080}" -h /www'],
    "env": {"PATH": "/bin", "GREETING": "hi"},
    "working_dir": "/www",
    "exposed_ports": ["8080/tcp"],
}
BUSYBOX_APPLETS = ("sh", "httpd", "echo", "cat", "ls", "sleep", "env", "id", "wget", "true", "false")


def tools_missing() -> str | None:
    """Why the registry tests cannot run here (a missing program), or None."""
    for program in (REGISTRY_BINARY, BUSYBOX, "umoci", "skopeo"):
        if shutil.which(program) is None:
            return f"{program} is not installed (Debian: docker-registry, busybox-static, umoci, skopeo)"
    return None


def _run(argv: Sequence[str], cwd: Path | None = None) -> str:
    done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}... exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def build_image(
    layout: Path,
    tag: str,
    *,
    entrypoint: Sequence[str] = (),
    cmd: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    working_dir: str | None = None,
    user: str | None = None,
    exposed_ports: Sequence[str] = (),
    architecture: str = "amd64",
    index: str = INDEX_TEXT,
    files: Mapping[str, bytes] | None = None,
) -> Path:
    """Build a busybox image tagged `tag` in the OCI layout at `layout` (made when missing): /bin/busybox
    with its applets, /www/index.html holding `index`, plus `files` (path in the image -> bytes). `layout`."""
    layout = Path(layout)
    if not (layout / "index.json").exists():
        _run(["umoci", "init", "--layout", str(layout)])
    root = layout.parent / f".{layout.name}-{tag}-root"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bin").mkdir(parents=True)
    (root / "www").mkdir()
    (root / "tmp").mkdir(mode=0o1777)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    (root / "www" / "index.html").write_text(index)
    for path, data in (files or {}).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    image = f"{layout}:{tag}"
    _run(["umoci", "new", "--image", image])
    _run(["umoci", "insert", "--rootless", "--image", image, str(root), "/"])
    shutil.rmtree(root, ignore_errors=True)
    config = ["umoci", "config", "--image", image, "--os", "linux", "--architecture", architecture]
    # umoci keeps what it is not told; a --clear first so that an empty entrypoint/cmd is really empty.
    config += ["--clear=config.entrypoint", "--clear=config.cmd", "--clear=config.env"]
    config += [arg for part in entrypoint for arg in ("--config.entrypoint", part)]
    config += [arg for part in cmd for arg in ("--config.cmd", part)]
    config += [arg for key, value in (env or {}).items() for arg in ("--config.env", f"{key}={value}")]
    config += [arg for port in exposed_ports for arg in ("--config.exposedports", port)]
    if working_dir is not None:
        config += ["--config.workingdir", working_dir]
    if user is not None:
        config += ["--config.user", user]
    _run(config)
    return layout


@dataclass
class Registry:
    host: str  # ADDRESS:PORT (127.0.0.1 unless told), what an image ref starts with
    url: str  # http(s)://host
    ca: Path | None  # the CA's certificate when serving TLS
    users: dict[str, str] = field(default_factory=dict)
    workdir: Path = Path()
    log: Path = Path()

    def client(self, *, auth: tuple[str, str] | None | Literal["first user"] = "first user") -> httpx.Client:
        """An httpx client for the registry's API, as the first user unless `auth` says otherwise (basic
        auth, or the bearer tokens it gets with it where the registry wants those; None: anonymous)."""
        if auth == "first user":
            auth = next(iter(self.users.items())) if self.users else None
        verify: Any = ssl.create_default_context(cafile=str(self.ca)) if self.ca is not None else False
        return httpx.Client(base_url=self.url, verify=verify, auth=_BearerOrBasic(auth) if auth else None,
                            timeout=30.0)

    def _skopeo_dest(self) -> list[str]:
        args = ["--dest-tls-verify=" + ("true" if self.ca is not None else "false")]
        if self.ca is not None:
            certs = self.workdir / "skopeo-certs"
            certs.mkdir(exist_ok=True)
            shutil.copy(self.ca, certs / "ca.crt")
            args += ["--dest-cert-dir", str(certs)]
        if self.users:
            user, password = next(iter(self.users.items()))
            args += ["--dest-creds", f"{user}:{password}"]
        return args

    def push(self, layout: Path, layout_tag: str, repo: str, tag: str, *, docker_format: bool = False) -> str:
        """Copy `layout_tag` of the OCI layout to `repo:tag` here; the pushed manifest's digest.
        `docker_format`: as a Docker v2 schema 2 manifest (skopeo converts), not an OCI one."""
        formats = ["--format", "v2s2"] if docker_format else []
        _run(["skopeo", "copy", "--quiet", *formats, *self._skopeo_dest(),
              f"oci:{layout}:{layout_tag}", f"docker://{self.host}/{repo}:{tag}"])
        return self.digest(repo, tag)

    def manifest(self, repo: str, reference: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of `repo`'s manifest by tag or digest."""
        with self.client() as client:
            answer = client.get(f"/v2/{repo}/manifests/{reference}", headers={"Accept": ACCEPT})
            answer.raise_for_status()
            body = answer.content
            return body, answer.headers["content-type"], "sha256:" + hashlib.sha256(body).hexdigest()

    def digest(self, repo: str, reference: str) -> str:
        return self.manifest(repo, reference)[2]

    def put_manifest(self, repo: str, reference: str, body: bytes, media_type: str) -> str:
        with self.client() as client:
            answer = client.put(f"/v2/{repo}/manifests/{reference}", content=body,
                                headers={"Content-Type": media_type})
            answer.raise_for_status()
        return "sha256:" + hashlib.sha256(body).hexdigest()

    def move_tag(self, repo: str, tag: str, digest: str) -> None:
        """Point `repo:tag` at the manifest `digest` (already in `repo`)."""
        body, media_type, _ = self.manifest(repo, digest)
        self.put_manifest(repo, tag, body, media_type)

    def push_index(self, repo: str, tag: str, platforms: Mapping[tuple[str, str], str]) -> str:
        """Tag an OCI image index over manifests already in `repo`: (os, architecture) -> digest."""
        manifests = []
        for (os_name, arch), digest in platforms.items():
            body, media_type, _ = self.manifest(repo, digest)
            manifests.append({"mediaType": media_type, "digest": digest, "size": len(body),
                              "platform": {"os": os_name, "architecture": arch}})
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}).encode()
        return self.put_manifest(repo, tag, index, OCI_INDEX)

    def delete_manifest(self, repo: str, digest: str) -> None:
        with self.client() as client:
            client.delete(f"/v2/{repo}/manifests/{digest}").raise_for_status()


def _htpasswd(users: Mapping[str, str]) -> str:
    import bcrypt  # a test extra: the registry's htpasswd takes bcrypt entries only

    return "".join(f"{user}:{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(rounds=4)).decode()}\n"
                   for user, pw in users.items())


@contextlib.contextmanager
def oci_registry(
    workdir: Path, *, tls: bool = False, users: Mapping[str, str] | None = None, token: bool = False,
    timeout_s: float = 30.0, address: str = "127.0.0.1",
) -> Iterator[Registry]:
    """Run a registry in `workdir` until the block ends. `tls`: HTTPS with a certificate for 127.0.0.1 from
    a CA made in `workdir/ca`; `users`: htpasswd basic auth for these user -> password, or with `token`
    bearer tokens from a token service in this process (`Bearer realm=...`, as Docker Hub's), which gives
    them to these users. `address`: where it listens, plain HTTP only past loopback (the multi-host
    cluster's registry host, tests/cluster/multihost.py); never a wildcard."""
    from common import tls as cluster_tls

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if address in ("0.0.0.0", "::", "") or (tls and address != "127.0.0.1"):
        raise ValueError(f"the test registry listens on one address, loopback for TLS: got {address!r}")
    port = free_port(address)
    host = f"{address}:{port}"
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(workdir / "storage")}, "delete": {"enabled": True}},
        "http": {"addr": host, "secret": "test-only"},
    }
    ca: Path | None = None
    if tls:
        ca = cluster_tls.init_ca(workdir / "ca", common_name="test registry CA")
        cert, key = cluster_tls.issue(workdir / "ca", role="bbs", name="registry", client_auth=False)
        config["http"]["tls"] = {"certificate": str(cert), "key": str(key)}
    tokens: contextlib.AbstractContextManager[str | None] = contextlib.nullcontext(None)
    if users and token:
        tokens = _token_service(workdir, dict(users))
    elif users:
        (workdir / "htpasswd").write_text(_htpasswd(users))
        config["auth"] = {"htpasswd": {"realm": "vendue-test", "path": str(workdir / "htpasswd")}}
    with tokens as realm:
        if realm is not None:
            config["auth"] = {"token": {"realm": realm, "service": TOKEN_SERVICE, "issuer": TOKEN_ISSUER,
                                        "rootcertbundle": str(workdir / "token-cert.pem")}}
        with _serving(workdir, config, host, tls, ca, users, timeout_s) as registry:
            yield registry


@contextlib.contextmanager
def _serving(workdir: Path, config: dict[str, Any], host: str, tls: bool, ca: Path | None,
             users: Mapping[str, str] | None, timeout_s: float) -> Iterator[Registry]:
    (workdir / "config.yml").write_text(json.dumps(config))  # JSON is YAML
    log = workdir / "registry.log"
    registry = Registry(host=host, url=("https://" if tls else "http://") + host, ca=ca,
                        users=dict(users or {}), workdir=workdir, log=log)
    with log.open("wb") as out:
        proc = subprocess.Popen([REGISTRY_BINARY, "serve", str(workdir / "config.yml")],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait_ready(registry, proc, timeout_s)
        yield registry
    finally:
        terminate_then_kill(proc, grace_s=5.0)


def _wait_ready(registry: Registry, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    seen: object = "nothing yet"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = registry.log.read_text()[-2000:]
            raise RuntimeError(f"docker-registry exited {proc.returncode}: {output}")
        try:
            with registry.client() as client:
                answer = client.get("/v2/")
            if answer.status_code in (200, 401):
                return
            seen = answer.status_code
        except httpx.HTTPError as error:
            seen = error
        time.sleep(0.05)  # polling the registry's readiness, not synchronising with a test's action
    raise RuntimeError(f"docker-registry at {registry.url} not ready in {timeout_s}s: expected 200/401, "
                       f"saw {seen}")


# --- bearer tokens: the distribution registry's `auth: token`, with a token service in this process ------

TOKEN_SERVICE = "vendue-test-registry"
TOKEN_ISSUER = "vendue-test-token-issuer"


class _BearerOrBasic(httpx.Auth):
    """Basic auth, or on a `Bearer` challenge a token from its realm asked for with the same credentials."""

    def __init__(self, credentials: tuple[str, str]) -> None:
        self.basic = httpx.BasicAuth(*credentials)

    def auth_flow(self, request: httpx.Request) -> Iterator[httpx.Request]:
        answer = yield next(self.basic.auth_flow(request))
        challenge = answer.headers.get("www-authenticate", "")
        if answer.status_code != 401 or not challenge.lower().startswith("bearer "):
            return
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = httpx.URL(params.pop("realm"), params=params)
        token_answer = yield next(self.basic.auth_flow(httpx.Request("GET", realm)))
        token_answer.read()
        request.headers["Authorization"] = f"Bearer {token_answer.json()['token']}"
        yield request


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@contextlib.contextmanager
def _token_service(workdir: Path, users: dict[str, str]) -> Iterator[str]:
    """A token service on loopback (plain http) for `users`: its realm URL. Its signing key's self-signed
    certificate is `workdir/token-cert.pem`, the registry's rootcertbundle; tokens name the key by its
    libtrust key id (what the registry matches `kid` against)."""
    import datetime as dt
    import threading
    import time as clock
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlsplit

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TOKEN_ISSUER)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1)).sign(key, hashes.SHA256()))
    (workdir / "token-cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    spki = key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    fingerprint = base64.b32encode(hashlib.sha256(spki).digest()[:30]).decode()
    kid = ":".join(fingerprint[i:i + 4] for i in range(0, 48, 4))

    def token(user: str, scopes: list[str]) -> str:
        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            repository, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": repository, "actions": actions.split(",")})
        issued = int(clock.time())
        claims = {"iss": TOKEN_ISSUER, "sub": user, "aud": TOKEN_SERVICE, "iat": issued, "nbf": issued - 60,
                  "exp": issued + 600, "jti": base64.b16encode(os.urandom(8)).decode(), "access": access}
        header = {"typ": "JWT", "alg": "ES256", "kid": kid}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            given = self.headers.get("Authorization", "")
            user, _, password = base64.b64decode(given[6:] or b"").decode(errors="replace").partition(":")
            if not given.startswith("Basic ") or users.get(user) != password:
                self.send_response(401)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = json.dumps({"token": token(user, parse_qs(urlsplit(self.path).query).get("scope", []))})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/token"
    finally:
        server.shutdown()
        server.server_close()
