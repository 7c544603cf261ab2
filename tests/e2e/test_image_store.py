"""The rep's image store (rep/image_store.py) against a real registry (tests/support/oci_registry.py): a
digest pulled once per host however many instances start at once, unpacked into the artifact cache and
evicted by it; the reasons a pull fails (missing, credentials refused, TLS not trusted)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.models.image import Image
from rep.artifact_cache import ArtifactCache, ArtifactError
from rep.image_store import ImageStore
from tests.support.oci_registry import HTTPD_IMAGE, INDEX_TEXT, build_image, oci_registry, tools_missing

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300),
              pytest.mark.skipif(tools_missing() is not None, reason=f"{tools_missing()}")]
MIB = 1024 * 1024


def test_a_digest_is_pulled_once_for_many_starts_and_evicted_with_the_cache(tmp_path: Path) -> None:
    with oci_registry(tmp_path / "registry") as reg:
        layout = build_image(tmp_path / "layout", "web", **HTTPD_IMAGE)
        digest = reg.push(layout, "web", "team/web", "1")
        other = reg.push(build_image(tmp_path / "layout", "b", **{**HTTPD_IMAGE, "index": "b\n"}), "b",
                         "team/b", "1")
        cache = ArtifactCache(tmp_path / "cache", 3 * MIB)  # room for one busybox tree at a time
        store = ImageStore(cache, insecure_registries=(reg.host,))

        async def main() -> None:
            image = Image(ref=f"{reg.host}/team/web:1", digest=digest)
            trees = await asyncio.gather(*(store.ensure(f"i{n}", image) for n in range(20)))
            assert len(set(trees)) == 1 and store.pulls == 1, (set(trees), store.pulls)
            assert (trees[0] / "www" / "index.html").read_text() == INDEX_TEXT
            assert (trees[0] / "bin" / "busybox").is_file()
            assert digest in cache.held()
            with pytest.raises(ArtifactError, match="cache full"):  # pinned by running instances
                await store.ensure("j", Image(ref=f"{reg.host}/team/b:1", digest=other))
            for n in range(20):
                cache.unpin(f"i{n}")
            await store.ensure("j", Image(ref=f"{reg.host}/team/b:1", digest=other))
            assert cache.held() == [other], "the least recently used image evicted"

        asyncio.run(main())


def test_a_pull_that_fails_says_why(tmp_path: Path) -> None:
    with oci_registry(tmp_path / "registry", tls=True, users={"alice": "s3cret"}) as reg:
        digest = reg.push(build_image(tmp_path / "layout", "web", **HTTPD_IMAGE), "web", "team/web", "1")
        assert reg.ca is not None
        ref = f"{reg.host}/team/web:1"

        async def reason(store: ImageStore, image: Image) -> str:
            with pytest.raises(ArtifactError) as failed:
                await store.ensure("i", image)
            return str(failed.value)

        async def main() -> None:
            trusting = ImageStore(ArtifactCache(tmp_path / "c1", 64 * MIB), registry_ca=reg.ca)
            alice = {"username": "alice", "password": "s3cret"}
            wrong = {"username": "alice", "password": "nope"}
            missing = "sha256:" + "0" * 64
            said = await reason(trusting, Image(ref=ref, digest=digest, credentials=wrong))
            assert said.startswith(f"image {reg.host}/team/web@"), said
            assert said.endswith("credentials refused"), said
            said = await reason(trusting, Image(ref=ref, digest=missing, credentials=alice))
            assert said.endswith("not found in the registry"), said
            untrusting = ImageStore(ArtifactCache(tmp_path / "c2", 64 * MIB))
            said = await reason(untrusting, Image(ref=ref, digest=digest, credentials=alice))
            assert "unreachable (TLS" in said, said
            tree = await trusting.ensure("i", Image(ref=ref, digest=digest, credentials=alice))
            assert (tree / "www" / "index.html").read_text() == INDEX_TEXT

        asyncio.run(main())
