"""What an image's config fills in of a definition (bbs/images.py), and the sealing and redaction of an
image's registry credentials."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError

from bbs.encryption import new_key_ring_json, parse_key_ring
from bbs.images import NO_COMMAND, fill_from_image
from bbs.redact import masked_env, without_credentials
from bbs.store.sealing import open_definition, seal_definition
from common.models import DesiredLRPCreate, TaskCreate
from common.registry import ImageConfig, Resolved, parse_ref

DIGEST = "sha256:" + "b" * 64
CONFIG = ImageConfig(entrypoint=["/bin/sh", "-c"], cmd=["exec httpd -p $PORT"],
                     env={"PATH": "/bin", "A": "1"}, working_dir="/www", user="1000",
                     exposed_ports=[8080, 9090])


def resolved(config: ImageConfig = CONFIG) -> Resolved:
    return Resolved(parse_ref("reg.example/web:1"), DIGEST, config)


def test_a_definition_without_command_env_or_ports_takes_the_images() -> None:
    given: dict[str, Any] = {"process_guid": "web", "image": {"ref": "reg.example/web:1"},
                             "env": {"A": "mine"}}
    out = fill_from_image(given, resolved(), whole=True)
    assert out["command"] == ["/bin/sh", "-c", "exec httpd -p $PORT"]
    assert out["env"] == {"PATH": "/bin", "A": "mine"}  # the definition's env wins over the image's
    assert out["ports"] == [8080]  # the first exposed port
    assert out["stack"] == "docker"
    assert out["image"] == {"ref": "reg.example/web:1", "digest": DIGEST, "working_dir": "/www",
                            "user": "1000"}
    assert DesiredLRPCreate.model_validate(out).image.digest == DIGEST  # type: ignore[union-attr]
    assert given["image"] == {"ref": "reg.example/web:1"}  # the request's fields are not changed in place


def test_what_the_definition_gives_is_kept() -> None:
    given = {"process_guid": "web", "command": ["./run"], "ports": [7000],
             "image": {"ref": "reg.example/web:1", "working_dir": "/app", "user": "app"}}
    out = fill_from_image(given, resolved(), whole=True)
    assert out["command"] == ["./run"] and out["ports"] == [7000]
    assert (out["image"]["working_dir"], out["image"]["user"]) == ("/app", "app")


def test_no_command_and_an_image_without_entrypoint_or_cmd_is_refused_naming_command() -> None:
    with pytest.raises(RequestValidationError) as refused:
        fill_from_image({"task_guid": "t", "image": {"ref": "reg.example/web:1"}}, resolved(ImageConfig()),
                        whole=True)
    (error,) = refused.value.errors()
    assert error["loc"] == ("body", "command") and error["msg"] == NO_COMMAND


def test_a_patch_fills_only_what_it_asks_for() -> None:
    patch: dict[str, Any] = {"image": {"ref": "reg.example/web:2"}}
    out = fill_from_image(patch, resolved(), whole=False)
    assert "command" not in out and "env" not in out and "ports" not in out  # the stored ones stay
    assert out["image"]["digest"] == DIGEST and out["stack"] == "docker"
    out = fill_from_image({**patch, "command": []}, resolved(), whole=False)
    assert out["command"] == ["/bin/sh", "-c", "exec httpd -p $PORT"]


def test_a_definition_needs_a_command_or_an_image() -> None:
    for model, guid in ((DesiredLRPCreate, "process_guid"), (TaskCreate, "task_guid")):
        with pytest.raises(ValueError) as refused:
            model.model_validate({guid: "x"})
        assert [e["loc"] for e in refused.value.errors()] == [("command",)]  # type: ignore[attr-defined]
        assert model.model_validate({guid: "x", "image": {"ref": "web"}}).command == []


CREDENTIALS = {"username": "alice", "password": "s3cret"}


def test_credentials_are_sealed_with_command_and_env_and_open_again() -> None:
    ring = parse_key_ring(new_key_ring_json(), "test")
    definition = {"process_guid": "web", "command": ["x"], "env": {},
                  "image": {"ref": "reg.example/web:1", "digest": DIGEST, "credentials": CREDENTIALS}}
    clear, label, sealed = seal_definition(ring, "desired_lrps", "web", definition)
    assert "s3cret" not in repr(clear) and "alice" not in repr(clear)
    assert clear["image"] == {"ref": "reg.example/web:1", "digest": DIGEST}
    assert sealed is not None and "s3cret" not in sealed
    opened = open_definition(ring, "desired_lrps", "web", dict(clear), label, sealed)  # type: ignore[type-var]
    assert opened == definition


def test_credentials_are_in_no_answer_and_no_event() -> None:
    row = {"process_guid": "web", "env": {"K": "v"}, "image": {"ref": "r", "credentials": CREDENTIALS}}
    assert without_credentials(row)["image"] == {"ref": "r"}
    assert "credentials" not in masked_env(row)["image"]
    assert row["image"]["credentials"] == CREDENTIALS  # a copy: the row may go to the auctioneer as it is
