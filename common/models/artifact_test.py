"""Artifacts on the wire: a digest, an optional http(s) URL the cluster may fetch, a destination inside the
instance's directory; bounded, each refusal naming its field (docs/artifacts.md)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from common.models import MAX_ARTIFACTS, DesiredLRP, DesiredLRPCreate, TaskCreate

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def lrp(**fields: Any) -> DesiredLRPCreate:
    return DesiredLRPCreate.model_validate({"process_guid": "web", "command": ["./run"], **fields})


def refusal(make: Any, **fields: Any) -> tuple[tuple[Any, ...], str]:
    with pytest.raises(ValidationError) as caught:
        make.model_validate(fields)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return errors[0]["loc"], errors[0]["msg"]


def test_an_lrps_source_blob_is_its_first_artifacts_digest_unless_set() -> None:
    assert lrp().source_blob is None and lrp().artifacts == []
    two = [{"digest": DIGEST, "dest": "app"}, {"digest": OTHER, "url": "https://files.example/x.tgz"}]
    assert lrp(artifacts=two).source_blob == DIGEST
    assert lrp(artifacts=two, source_blob="droplet-7").source_blob == "droplet-7"
    # As stored and read back: the same, and the artifacts kept whole.
    stored = lrp(artifacts=two).model_dump(mode="json")
    assert stored["artifacts"][1] == {"digest": OTHER, "url": "https://files.example/x.tgz", "dest": "."}
    again = DesiredLRP.model_validate({**stored, "created_at": "2026-11-28T00:00:00Z",
                                       "modification_tag": {"epoch": "e"}})
    assert again.source_blob == DIGEST and again.artifacts == lrp(artifacts=two).artifacts


def test_a_task_names_artifacts_too() -> None:
    task = TaskCreate.model_validate({"task_guid": "t", "command": ["./migrate.sh"],
                                      "artifacts": [{"digest": DIGEST, "dest": "bin"}]})
    assert [(a.digest, a.url, a.dest) for a in task.artifacts] == [(DIGEST, None, "bin")]


@pytest.mark.parametrize(("artifact", "field", "says"), [
    ({"digest": "sha256:" + "AB" * 32}, "digest", "pattern"),
    ({"digest": "sha256:abc"}, "digest", "pattern"),
    ({"digest": "md5:" + "0" * 32}, "digest", "pattern"),
    ({}, "digest", "required"),
    ({"digest": DIGEST, "dest": "/etc"}, "dest", "absolute"),
    ({"digest": DIGEST, "dest": "app/../../etc"}, "dest", "'..'"),
    ({"digest": DIGEST, "dest": ".."}, "dest", "'..'"),
    ({"digest": DIGEST, "dest": ""}, "dest", "empty"),
    ({"digest": DIGEST, "dest": "a\\..\\b"}, "dest", "backslash"),
    ({"digest": DIGEST, "dest": "a\0b"}, "dest", "NUL"),
    ({"digest": DIGEST, "dest": "a" * 1025}, "dest", "1024"),
    ({"digest": DIGEST, "url": "ftp://files.example/x"}, "url", "only http and https"),
    ({"digest": DIGEST, "url": "x.tgz"}, "url", "relative"),
    ({"digest": DIGEST, "url": "http://169.254.169.254/latest/meta-data"}, "url", "metadata"),
    ({"digest": DIGEST, "url": "http://2852039166/"}, "url", "metadata"),
    ({"digest": DIGEST, "url": "http://[fe80::1]/x"}, "url", "link-local"),
    ({"digest": DIGEST, "url": "http://metadata.google.internal/x"}, "url", "metadata"),
    ({"digest": DIGEST, "size": 3}, "size", "Extra inputs"),
])
def test_a_bad_artifact_is_refused_naming_its_field(artifact: dict[str, Any], field: str, says: str) -> None:
    for make, base in ((DesiredLRPCreate, {"process_guid": "web"}), (TaskCreate, {"task_guid": "t"})):
        loc, message = refusal(make, **base, command=["x"], artifacts=[artifact])
        assert loc == ("artifacts", 0, field), (loc, message)
        assert says in message, message


def test_the_number_of_artifacts_is_bounded() -> None:
    assert len(lrp(artifacts=[{"digest": DIGEST}] * MAX_ARTIFACTS).artifacts) == MAX_ARTIFACTS
    loc, message = refusal(DesiredLRPCreate, process_guid="web", command=["x"],
                           artifacts=[{"digest": DIGEST}] * (MAX_ARTIFACTS + 1))
    assert loc == ("artifacts",) and str(MAX_ARTIFACTS) in message
