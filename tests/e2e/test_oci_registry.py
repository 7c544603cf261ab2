"""The test registry harness (tests/support/oci_registry.py) itself: a real registry serves what skopeo
pushed, over TLS with basic auth, and a moved tag names the other manifest."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.oci_registry import ACCEPT, HTTPD_IMAGE, build_image, oci_registry, tools_missing

MISSING = tools_missing()
pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(MISSING is not None, reason=str(MISSING))]


def test_a_pushed_image_is_served_by_digest_with_its_config_and_a_tag_moves(tmp_path: Path) -> None:
    layout = build_image(tmp_path / "layout", "v1", **HTTPD_IMAGE)
    build_image(layout, "v2", **HTTPD_IMAGE, index="second\n")
    with oci_registry(tmp_path / "registry", tls=True, users={"alice": "s3cret"}) as registry:
        first = registry.push(layout, "v1", "team/web", "latest")
        second = registry.push(layout, "v2", "team/web", "v2")
        assert first != second
        assert registry.digest("team/web", "latest") == first

        with registry.client() as client:
            answer = client.get(f"/v2/team/web/manifests/{first}", headers={"Accept": ACCEPT})
            blob = json.loads(answer.content)["config"]["digest"]
            config = client.get(f"/v2/team/web/blobs/{blob}", follow_redirects=True).json()
        assert config["config"]["Entrypoint"] == HTTPD_IMAGE["entrypoint"]
        assert config["config"]["Cmd"] == HTTPD_IMAGE["cmd"]
        assert config["config"]["WorkingDir"] == "/www"
        assert "8080/tcp" in config["config"]["ExposedPorts"]
        assert (config["os"], config["architecture"]) == ("linux", "amd64")

        registry.move_tag("team/web", "latest", second)
        assert registry.digest("team/web", "latest") == second
        assert registry.digest("team/web", first) == first  # the old manifest stays, by digest

        # Basic auth is enforced, and TLS is verified against the test's CA.
        with registry.client(auth=("alice", "wrong")) as client:
            assert client.get("/v2/").status_code == 401
        with pytest.raises(httpx.ConnectError):
            httpx.get(registry.url + "/v2/", timeout=10.0)  # the system trust store does not know the CA


def test_an_index_names_its_platform_manifests_over_plain_http(tmp_path: Path) -> None:
    layout = build_image(tmp_path / "layout", "amd64", **HTTPD_IMAGE)
    build_image(layout, "arm64", **HTTPD_IMAGE, architecture="arm64")
    with oci_registry(tmp_path / "registry") as registry:
        assert registry.url.startswith("http://")
        amd64 = registry.push(layout, "amd64", "multi", "amd64")
        arm64 = registry.push(layout, "arm64", "multi", "arm64")
        index = registry.push_index("multi", "latest", {("linux", "arm64"): arm64, ("linux", "amd64"): amd64})
        body, media_type, digest = registry.manifest("multi", "latest")
        assert digest == index and media_type.startswith("application/vnd.oci.image.index.v1+json")
        assert [m["digest"] for m in json.loads(body)["manifests"]] == [arm64, amd64]
