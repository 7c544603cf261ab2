"""A client of the OCI distribution API, enough to pin an image: resolve a reference (by tag or by digest) to
the digest of its linux/amd64 manifest, and read that image's config (entrypoint, cmd, env, working dir,
user, exposed ports). The BBS pins with it (bbs/images.py); docs/containers.md, "Images".

- **Which digest.** A reference may name an index (an OCI image index or a Docker manifest list) or one
  image manifest. The digest pinned is always the image manifest's, the linux/amd64 one picked from an
  index: what runs is exactly that manifest, whatever the index later lists, and a rep pulls
  `<repository>@<digest>` without choosing a platform again.
- **Auth.** Anonymous first; on a 401 the challenge (`WWW-Authenticate`) says how: `Basic` (the
  credentials given), or `Bearer realm=...,service=...,scope=...` (a token from the realm, asked for with
  the credentials given, or anonymously).
- **Transport.** https, verified against the system's trust store plus `ca` when given; plain http only for
  the hosts listed as insecure (`--insecure-registry HOST:PORT`). No proxies from the environment.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFESTS = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
INDEXES = frozenset({OCI_INDEX, DOCKER_LIST})
ACCEPT = ", ".join((OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST))

PLATFORM = ("linux", "amd64")  # what the cells run
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the distribution spec's limit on a manifest a registry must take
MAX_CONFIG_BYTES = 8 * 1024 * 1024

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(Exception):
    """The image cannot be pinned; `str()` is the reason, one line, fit for a 422 naming `image`."""


class BadReference(RegistryError):
    pass


class ImageNotFound(RegistryError):
    pass


class Unauthorized(RegistryError):
    pass


class Unreachable(RegistryError):
    pass


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port], as in the reference (docker.io for Docker Hub)
    repository: str
    tag: str | None
    digest: str | None

    @property
    def reference(self) -> str:
        """What the manifest is asked for by: the digest when given, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    def pinned(self, digest: str) -> str:
        """`registry/repository@digest`: what a rep pulls."""
        return f"{self.registry}/{self.repository}@{digest}"


def parse_ref(ref: str) -> ImageRef:
    """A reference as Docker reads one: `[host[:port]/]path[:tag][@sha256:hex]`; the first component is a
    host when it holds a dot or a colon or is `localhost`, else the image is Docker Hub's (`library/` for a
    one-component path). Raises BadReference."""
    text = ref.strip()
    digest = None
    if "@" in text:
        text, digest = text.split("@", 1)
        if not _DIGEST.match(digest):
            raise BadReference(f"{ref!r}: the digest must be sha256: and 64 lowercase hex digits")
    first, slash, rest = text.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, text
    tag = None
    name, colon, maybe_tag = path.rpartition(":")
    if colon and "/" not in maybe_tag:
        path, tag = name, maybe_tag
        if not _TAG.match(tag):
            raise BadReference(f"{ref!r}: invalid tag {tag!r}")
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not path or not _REPOSITORY.match(path):
        raise BadReference(f"{ref!r}: invalid repository name {path!r} "
                           "(lowercase letters, digits, . _ - and /)")
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry, path, tag, digest)


@dataclass
class ImageConfig:
    """What an image's config says about running it (the OCI image spec's `config` object)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str | None = None
    user: str | None = None
    exposed_ports: list[int] = field(default_factory=list)  # TCP ports, in the order the config lists them

    @classmethod
    def from_blob(cls, blob: Mapping[str, Any]) -> ImageConfig:
        config = blob.get("config") or {}
        if not isinstance(config, Mapping):
            raise RegistryError("the image's config is not an object")
        env: dict[str, str] = {}
        for entry in config.get("Env") or []:
            name, _, value = str(entry).partition("=")
            if name:
                env[name] = value
        ports = []
        for spec in config.get("ExposedPorts") or {}:
            number, _, protocol = str(spec).partition("/")
            if (protocol or "tcp") == "tcp" and number.isdigit() and 0 < int(number) < 65536:
                ports.append(int(number))
        return cls(
            entrypoint=[str(a) for a in config.get("Entrypoint") or []],
            cmd=[str(a) for a in config.get("Cmd") or []],
            env=env,
            working_dir=str(config["WorkingDir"]) if config.get("WorkingDir") else None,
            user=str(config["User"]) if config.get("User") else None,
            exposed_ports=ports,
        )


@dataclass
class Resolved:
    ref: ImageRef
    digest: str  # the platform manifest's
    config: ImageConfig
    index_digest: str | None = None  # the index the reference named, if it named one


def registry_tls_context(ca: Path | None = None) -> ssl.SSLContext:
    """The system's trust store, plus `ca` when given. Raises OSError/ssl.SSLError when `ca` cannot load."""
    context = ssl.create_default_context()
    if ca is not None:
        context.load_verify_locations(cafile=str(ca))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class RegistryClient:
    def __init__(self, *, insecure: Iterable[str] = (), ca: Path | None = None, timeout: float = 10.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.insecure = frozenset(insecure)
        self._client = httpx.AsyncClient(
            timeout=timeout, verify=registry_tls_context(ca), trust_env=False, follow_redirects=True,
            transport=transport, limits=httpx.Limits(max_connections=20, max_keepalive_connections=5))

    async def close(self) -> None:
        await self._client.aclose()

    def base_url(self, ref: ImageRef) -> str:
        scheme = "http" if ref.registry in self.insecure else "https"
        return f"{scheme}://{ref.api_host}"

    async def resolve(self, ref: str, credentials: tuple[str, str] | None = None) -> Resolved:
        """Pin `ref`: the digest of its linux/amd64 manifest and that image's config. Raises RegistryError
        (a subclass saying which failure) with the reason."""
        parsed = parse_ref(ref)
        session = _Session(self, parsed, credentials)
        body, media_type = await session.manifest(parsed.reference)
        digest, index_digest = _digest_of(body), None
        if parsed.digest is not None and digest != parsed.digest:
            raise ImageNotFound(f"the registry answered {parsed.digest} with a manifest whose digest is "
                                f"{digest}")
        document = _json(body, "manifest")
        if media_type in INDEXES:
            index_digest = digest
            digest = _platform_manifest(document, media_type)
            body, media_type = await session.manifest(digest)
            if _digest_of(body) != digest:
                raise RegistryError(f"the manifest {digest} the index names does not match its digest")
            document = _json(body, "manifest")
        if media_type not in MANIFESTS:
            raise RegistryError(f"unsupported manifest type {media_type!r} (OCI or Docker v2 schema 2 only)")
        config_digest = (document.get("config") or {}).get("digest")
        if not isinstance(config_digest, str) or not _DIGEST.match(config_digest):
            raise RegistryError("the manifest names no sha256 config blob")
        blob = await session.blob(config_digest)
        if _digest_of(blob) != config_digest:
            raise RegistryError(f"the config blob does not match its digest {config_digest}")
        config_document = _json(blob, "config")
        platform = (config_document.get("os"), config_document.get("architecture"))
        if None not in platform and platform != PLATFORM:
            raise RegistryError(f"the image is for {platform[0]}/{platform[1]}, the cells run "
                                f"{PLATFORM[0]}/{PLATFORM[1]}")
        return Resolved(parsed, digest, ImageConfig.from_blob(config_document), index_digest)


def _json(body: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError:
        raise RegistryError(f"the registry's {what} is not JSON") from None
    if not isinstance(document, dict):
        raise RegistryError(f"the registry's {what} is not a JSON object")
    return document


def _platform_manifest(index: Mapping[str, Any], media_type: str) -> str:
    seen = []
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        key = (platform.get("os"), platform.get("architecture"))
        seen.append(f"{key[0]}/{key[1]}")
        digest = entry.get("digest")
        if key == PLATFORM and isinstance(digest, str) and _DIGEST.match(digest):
            return digest
    listed = ", ".join(sorted(set(seen))) or "none"
    kind = "index" if media_type == OCI_INDEX else "manifest list"
    raise ImageNotFound(f"the image's {kind} has no {PLATFORM[0]}/{PLATFORM[1]} manifest "
                        f"(it lists: {listed})")


class _Session:
    """One resolution's requests to one repository: the authorization found on the first 401, reused."""

    def __init__(self, client: RegistryClient, ref: ImageRef, credentials: tuple[str, str] | None) -> None:
        self.client, self.ref, self.credentials = client, ref, credentials
        self.base = client.base_url(ref)
        self.authorization: str | None = None

    async def manifest(self, reference: str) -> tuple[bytes, str]:
        answer = await self._get(f"/v2/{self.ref.repository}/manifests/{reference}", {"Accept": ACCEPT},
                                 MAX_MANIFEST_BYTES)
        media_type = answer.headers.get("content-type", "").split(";")[0].strip()
        if media_type in ("", "application/json", "text/plain"):  # some registries: the manifest's own field
            media_type = str(_json(answer.content, "manifest").get("mediaType") or media_type)
        return answer.content, media_type

    async def blob(self, digest: str) -> bytes:
        return (await self._get(f"/v2/{self.ref.repository}/blobs/{digest}", {}, MAX_CONFIG_BYTES)).content

    async def _get(self, path: str, headers: dict[str, str], limit: int) -> httpx.Response:
        answer = await self._send(path, headers)
        if answer.status_code == 401:
            self.authorization = await self._authorize(answer)
            answer = await self._send(path, headers)
            if answer.status_code == 401:
                raise Unauthorized(self._refused())
        if answer.status_code == 403:
            raise Unauthorized(self._refused())
        if answer.status_code == 404:
            what = "manifest" if "/manifests/" in path else "blob"
            name = path.rsplit("/", 1)[1]
            raise ImageNotFound(f"{self.ref.registry}/{self.ref.repository}: {what} {name} not found"
                                f"{_registry_code(answer)}")
        if answer.status_code != 200:
            raise RegistryError(f"{self.ref.registry} answered {answer.status_code}{_registry_code(answer)}")
        if len(answer.content) > limit:
            raise RegistryError(f"{self.ref.registry}: the answer to {path} is over {limit} bytes")
        return answer

    def _refused(self) -> str:
        if self.credentials is None:
            return f"{self.ref.registry} requires credentials to pull {self.ref.repository}"
        return f"{self.ref.registry} refused the credentials for {self.ref.repository}"

    async def _send(self, path: str, headers: dict[str, str]) -> httpx.Response:
        if self.authorization is not None:
            headers = {**headers, "Authorization": self.authorization}
        try:
            return await self.client._client.get(self.base + path, headers=headers)
        except httpx.TimeoutException:
            raise Unreachable(f"{self.ref.registry} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise Unreachable(f"{self.ref.registry} unreachable: {_reason(exc)}") from None

    async def _authorize(self, challenged: httpx.Response) -> str:
        challenge = challenged.headers.get("www-authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if self.credentials is None:
                raise Unauthorized(self._refused())
            return _basic(self.credentials)
        if scheme != "bearer":
            raise Unauthorized(f"{self.ref.registry} asks for an unsupported authentication "
                               f"({challenge[:64]!r})")
        params = dict(_CHALLENGE_PARAM.findall(challenge))
        realm = params.get("realm")
        if not realm or not realm.startswith(("https://", "http://")):
            raise Unauthorized(f"{self.ref.registry}'s bearer challenge names no token realm")
        query = {"service": params.get("service", ""),
                 "scope": params.get("scope") or f"repository:{self.ref.repository}:pull"}
        auth = httpx.BasicAuth(*self.credentials) if self.credentials is not None else None
        try:
            answer = await self.client._client.get(realm, params=query, auth=auth)
        except httpx.HTTPError as exc:
            raise Unreachable(f"the token service of {self.ref.registry} unreachable: "
                              f"{_reason(exc)}") from None
        if answer.status_code in (401, 403):
            raise Unauthorized(self._refused())
        if answer.status_code != 200:
            raise Unauthorized(f"the token service of {self.ref.registry} answered {answer.status_code}")
        token = _json(answer.content, "token answer")
        value = token.get("token") or token.get("access_token")
        if not isinstance(value, str) or not value:
            raise Unauthorized(f"the token service of {self.ref.registry} gave no token")
        return f"Bearer {value}"


def _basic(credentials: tuple[str, str]) -> str:
    user, password = credentials
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _registry_code(answer: httpx.Response) -> str:
    """The registry's error code (`MANIFEST_UNKNOWN`, ...) when its answer carries one."""
    try:
        errors = answer.json().get("errors") or []
        code = errors[0].get("code") if errors else None
    except (ValueError, AttributeError):
        return ""
    return f" ({code})" if isinstance(code, str) and code.isupper() and len(code) < 64 else ""


def _reason(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "its certificate is not trusted (--registry-ca, or --insecure-registry for plain http)"
    return text.splitlines()[0][:200]
