"""The registry client without a registry: references, the bearer-token dance, an index's platform, the
failures' reasons (tests/e2e/test_registry_client.py asks a real registry)."""

from __future__ import annotations

import hashlib
import json

import httpx
import pytest

from common.registry import (
    OCI_INDEX,
    OCI_MANIFEST,
    BadReference,
    ImageConfig,
    ImageNotFound,
    RegistryClient,
    Unauthorized,
    Unreachable,
    parse_ref,
)


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def test_references_are_read_as_docker_reads_them() -> None:
    ref = parse_ref("busybox")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        "docker.io", "library/busybox", "latest", None)
    assert ref.api_host == "registry-1.docker.io"
    ref = parse_ref("127.0.0.1:5000/team/web:1.4")
    assert (ref.registry, ref.repository, ref.tag) == ("127.0.0.1:5000", "team/web", "1.4")
    hexdigest = "a" * 64
    ref = parse_ref(f"localhost/web@sha256:{hexdigest}")
    assert (ref.registry, ref.repository, ref.tag, ref.reference) == (
        "localhost", "web", None, f"sha256:{hexdigest}")
    assert parse_ref("team/web:v2").repository == "team/web"
    for bad in ("Team/Web", "web@sha256:abc", "web:", "host:5000/web:bad/tag", "/web"):
        with pytest.raises(BadReference):
            parse_ref(bad)


def test_the_config_says_entrypoint_cmd_env_dir_user_and_tcp_ports() -> None:
    config = ImageConfig.from_blob({"config": {
        "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["exec httpd"], "Env": ["PATH=/bin", "EMPTY=", "A=b=c"],
        "WorkingDir": "/www", "User": "1000:1000", "ExposedPorts": {"53/udp": {}, "8080/tcp": {}, "9090": {}},
    }})
    assert config.entrypoint == ["/bin/sh", "-c"] and config.cmd == ["exec httpd"]
    assert config.env == {"PATH": "/bin", "EMPTY": "", "A": "b=c"}
    assert (config.working_dir, config.user, config.exposed_ports) == ("/www", "1000:1000", [8080, 9090])
    assert ImageConfig.from_blob({}) == ImageConfig()


class FakeRegistry:
    """A registry behind httpx.MockTransport that wants a bearer token from its realm."""

    def __init__(self, *, user: str = "alice", password: str = "s3cret") -> None:
        self.user, self.password = user, password
        self.token_requests: list[httpx.Request] = []
        amd64_config = json.dumps({"os": "linux", "architecture": "amd64",
                                   "config": {"Cmd": ["run"], "ExposedPorts": {"9000/tcp": {}}}}).encode()
        arm_config = json.dumps({"os": "linux", "architecture": "arm64", "config": {"Cmd": ["arm"]}}).encode()
        self.blobs = {digest(amd64_config): amd64_config, digest(arm_config): arm_config}
        self.manifests: dict[str, tuple[bytes, str]] = {}
        platforms = []
        for config, arch in ((arm_config, "arm64"), (amd64_config, "amd64")):
            body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": [],
                               "config": {"digest": digest(config), "size": len(config)}}).encode()
            self.manifests[digest(body)] = (body, OCI_MANIFEST)
            platforms.append({"digest": digest(body), "platform": {"os": "linux", "architecture": arch}})
            if arch == "amd64":
                self.amd64 = digest(body)
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": platforms}).encode()
        self.index = digest(index)
        self.manifests[self.index] = self.manifests["v1"] = (index, OCI_INDEX)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example":
            self.token_requests.append(request)
            expected = httpx.BasicAuth(self.user, self.password)
            given = request.headers.get("authorization")
            if given != next(expected.auth_flow(httpx.Request("GET", "/"))).headers["authorization"]:
                return httpx.Response(401)
            return httpx.Response(200, json={"token": "tok"})
        if request.headers.get("authorization") != "Bearer tok":
            return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="https://auth.example/token",'
                                               'service="reg.example",scope="repository:team/app:pull"'})
        path = request.url.path
        if "/manifests/" in path:
            found = self.manifests.get(path.rsplit("/", 1)[1])
            if found is None:
                return httpx.Response(404, json={"errors": [{"code": "MANIFEST_UNKNOWN"}]})
            return httpx.Response(200, content=found[0], headers={"content-type": found[1]})
        blob = self.blobs.get(path.rsplit("/", 1)[1])
        return httpx.Response(200, content=blob) if blob is not None else httpx.Response(404)


async def test_a_bearer_registry_pins_the_linux_amd64_manifest_of_an_index() -> None:
    fake = FakeRegistry()
    client = RegistryClient(transport=httpx.MockTransport(fake.handle))
    try:
        resolved = await client.resolve("reg.example/team/app:v1", ("alice", "s3cret"))
        assert (resolved.digest, resolved.index_digest) == (fake.amd64, fake.index)
        assert resolved.config.cmd == ["run"] and resolved.config.exposed_ports == [9000]
        assert fake.token_requests[0].url.params["scope"] == "repository:team/app:pull"
        assert fake.token_requests[0].url.params["service"] == "reg.example"
        assert len(fake.token_requests) == 1  # one token for the whole resolution
        # By digest: the index's, or the platform manifest's itself.
        for pinned in (fake.index, fake.amd64):
            by_digest = await client.resolve(f"reg.example/team/app@{pinned}", ("alice", "s3cret"))
            assert by_digest.digest == fake.amd64
        with pytest.raises(Unauthorized, match="refused the credentials"):
            await client.resolve("reg.example/team/app:v1", ("alice", "wrong"))
        with pytest.raises(ImageNotFound, match="MANIFEST_UNKNOWN"):
            await client.resolve("reg.example/team/app:v2", ("alice", "s3cret"))
        with pytest.raises(ImageNotFound, match="not found"):
            await client.resolve(f"reg.example/team/app@sha256:{'0' * 64}", ("alice", "s3cret"))
    finally:
        await client.close()


async def test_an_index_without_linux_amd64_and_an_unreachable_registry_say_so() -> None:
    fake = FakeRegistry()
    del fake.manifests["v1"]
    arm_only = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"digest": "sha256:" + "1" * 64, "platform": {"os": "linux", "architecture": "arm64"}}]}).encode()
    fake.manifests["arm"] = (arm_only, OCI_INDEX)
    client = RegistryClient(transport=httpx.MockTransport(fake.handle))
    try:
        with pytest.raises(ImageNotFound, match=r"no linux/amd64 manifest \(it lists: linux/arm64\)"):
            await client.resolve("reg.example/team/app:arm", ("alice", "s3cret"))
    finally:
        await client.close()

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    client = RegistryClient(transport=httpx.MockTransport(refuse))
    try:
        with pytest.raises(Unreachable, match="reg.example unreachable: connection refused"):
            await client.resolve("reg.example/team/app:v1")
    finally:
        await client.close()
