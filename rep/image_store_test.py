from __future__ import annotations

import pytest

from common.models.image import Image
from rep.image_store import _why, describe_image, split_ref


@pytest.mark.parametrize(("ref", "expected"), [
    ("127.0.0.1:5000/team/web:1", ("127.0.0.1:5000", "team/web")),
    ("registry.example/web@sha256:" + "a" * 64, ("registry.example", "web")),
    ("localhost/web", ("localhost", "web")),
    ("busybox", ("docker.io", "library/busybox")),
    ("team/web:latest", ("docker.io", "team/web")),
    ("host:5000/a/b/c", ("host:5000", "a/b/c")),
])
def test_a_reference_names_its_registry_and_repository(ref: str, expected: tuple[str, str]) -> None:
    assert split_ref(ref) == expected


def test_a_pull_failure_says_why() -> None:
    assert _why("reading manifest sha256:00 in 127.0.0.1:1/web: manifest unknown") == (
        "not found in the registry")
    assert _why("invalid username/password: unauthorized") == "credentials refused"
    assert _why("Digest did not match, expected sha256:1, got sha256:2") == "digest mismatch"
    assert _why("pinging container registry: dial tcp 127.0.0.1:1: connect: connection refused").startswith(
        "unreachable (")


def test_an_image_is_described_by_repository_and_digest() -> None:
    image = Image(ref="127.0.0.1:5000/team/web:1", digest="sha256:" + "ab" * 32)
    assert describe_image(image) == "image 127.0.0.1:5000/team/web@sha256:abababababab…"
