"""The registry client (common/registry.py) against a real registry (tests/support/oci_registry.py): TLS
with the test's CA and htpasswd basic auth, plain http for a registry listed insecure, OCI and Docker
manifests, an index's linux/amd64 manifest, and each failure's reason."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.registry import (
    DOCKER_MANIFEST,
    ImageNotFound,
    RegistryClient,
    Resolved,
    Unauthorized,
    Unreachable,
)
from tests.support.oci_registry import HTTPD_IMAGE, Registry, build_image, oci_registry, tools_missing

MISSING = tools_missing()
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120),
              pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]

CREDS = ("alice", "s3cret")


@dataclass
class Registries:
    private: Registry
    public: Registry
    oci: str
    docker: str
    arm: str


@pytest.fixture(scope="module")
def registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registries]:
    tmp = tmp_path_factory.mktemp("registry-client")
    layout = build_image(tmp / "layout", "web", **HTTPD_IMAGE)
    build_image(layout, "arm", **HTTPD_IMAGE, architecture="arm64")
    with oci_registry(tmp / "private", tls=True, users=dict([CREDS])) as private, \
            oci_registry(tmp / "public") as public:
        oci = private.push(layout, "web", "team/web", "1")
        docker = private.push(layout, "web", "team/web", "docker", docker_format=True)
        arm = public.push(layout, "arm", "multi", "arm")
        public.push(layout, "web", "multi", "amd")
        public.push(layout, "arm", "armonly", "1")
        yield Registries(private, public, oci, docker, arm)


async def resolve(r: Registries, ref: str, credentials: tuple[str, str] | None = CREDS, *,
                  ca: Path | None = None, insecure: tuple[str, ...] | None = None) -> Resolved:
    insecure = (r.public.host,) if insecure is None else insecure
    client = RegistryClient(ca=ca or r.private.ca, insecure=insecure)
    try:
        return await client.resolve(ref, credentials)
    finally:
        await client.close()


async def test_a_tag_over_tls_with_basic_auth_is_its_manifests_digest_and_config(
        registries: Registries) -> None:
    r = registries
    resolved = await resolve(r, f"{r.private.host}/team/web:1")
    assert resolved.digest == r.oci and resolved.index_digest is None
    config = resolved.config
    assert (config.entrypoint, config.cmd) == (HTTPD_IMAGE["entrypoint"], HTTPD_IMAGE["cmd"])
    assert config.env == HTTPD_IMAGE["env"]
    assert (config.working_dir, config.exposed_ports) == ("/www", [8080])
    by_digest = await resolve(r, f"{r.private.host}/team/web@{r.oci}")
    assert by_digest.digest == r.oci


async def test_a_docker_v2_manifest_resolves_as_an_oci_one(registries: Registries) -> None:
    r = registries
    assert r.private.manifest("team/web", "docker")[1].startswith(DOCKER_MANIFEST)
    resolved = await resolve(r, f"{r.private.host}/team/web:docker")
    assert resolved.digest == r.docker != r.oci
    assert resolved.config.cmd == HTTPD_IMAGE["cmd"]


async def test_an_index_pins_its_linux_amd64_manifest_over_plain_http(registries: Registries) -> None:
    r = registries
    amd = r.public.digest("multi", "amd")
    index = r.public.push_index("multi", "latest", {("linux", "arm64"): r.arm, ("linux", "amd64"): amd})
    resolved = await resolve(r, f"{r.public.host}/multi:latest", None)
    assert (resolved.digest, resolved.index_digest) == (amd, index)
    assert (await resolve(r, f"{r.public.host}/multi@{index}", None)).digest == amd
    # An image for another platform alone is refused, saying which.
    with pytest.raises(Exception, match="linux/arm64"):
        await resolve(r, f"{r.public.host}/armonly:1", None)


async def test_each_failure_says_why(registries: Registries) -> None:
    r = registries
    with pytest.raises(Unauthorized, match="refused the credentials"):
        await resolve(r, f"{r.private.host}/team/web:1", ("alice", "wrong"))
    with pytest.raises(Unauthorized, match="requires credentials"):
        await resolve(r, f"{r.private.host}/team/web:1", None)
    with pytest.raises(ImageNotFound, match="MANIFEST_UNKNOWN"):
        await resolve(r, f"{r.private.host}/team/web:nosuch")
    client = RegistryClient()  # the system's trust store alone: the test's CA is not in it
    try:
        with pytest.raises(Unreachable, match="not trusted"):
            await client.resolve(f"{r.private.host}/team/web:1", CREDS)
    finally:
        await client.close()
    with pytest.raises(Unreachable, match="unreachable"):  # https asked of a plain-http registry
        await resolve(r, f"{r.public.host}/multi:amd", None, insecure=())


async def test_a_registry_that_wants_bearer_tokens_gets_one_from_its_realm(tmp_path: Path) -> None:
    layout = build_image(tmp_path / "layout", "web", **HTTPD_IMAGE)
    with oci_registry(tmp_path / "token", users=dict([CREDS]), token=True) as registry:
        digest = registry.push(layout, "web", "team/web", "1")
        with registry.client(auth=None) as anonymous:
            challenge = anonymous.get("/v2/team/web/manifests/1")
        # Anonymous first: the challenge names the realm, the service and the scope asked.
        assert challenge.status_code == 401
        assert challenge.headers["www-authenticate"].startswith("Bearer realm="), challenge.headers
        client = RegistryClient(insecure=(registry.host,))
        try:
            resolved = await client.resolve(f"{registry.host}/team/web:1", CREDS)
            assert resolved.digest == digest and resolved.config.cmd == HTTPD_IMAGE["cmd"]
            with pytest.raises(Unauthorized, match="refused the credentials"):
                await client.resolve(f"{registry.host}/team/web:1", ("alice", "wrong"))
            with pytest.raises(Unauthorized, match="requires credentials"):
                await client.resolve(f"{registry.host}/team/web:1", None)
        finally:
            await client.close()
