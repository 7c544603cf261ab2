"""`--image` and registry credentials on the command line (deploy/image_args.py), images in manifests
(deploy/manifest.py) and their plans (deploy/manifest_plan.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from common.models import DesiredLRP
from deploy.image_args import PASSWORD_ENV, USERNAME_ENV, image_field, read_credentials_file
from deploy.manifest import ManifestError, app_spec_of, parse_manifest
from deploy.manifest_plan import plan_app, wanted_wire

DIGEST = "sha256:" + "d" * 64


def test_a_credentials_file_is_user_colon_password_or_json(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("alice:pa:ss\n")
    assert read_credentials_file(plain) == {"username": "alice", "password": "pa:ss"}
    document = tmp_path / "json"
    document.write_text('{"username": "bob", "password": "x"}')
    assert read_credentials_file(document) == {"username": "bob", "password": "x"}
    for bad in ("alice", ":pw", "alice:", '{"username": "bob"}', "a:b\nc:d", "{nope"):
        (tmp_path / "bad").write_text(bad)
        with pytest.raises(ValueError) as refused:
            read_credentials_file(tmp_path / "bad")
        assert "pw" not in str(refused.value) and "nope" not in str(refused.value)  # never the content


def test_credentials_come_from_the_file_else_the_environment(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(USERNAME_ENV, raising=False)
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    assert image_field("reg/web:1", None) == {"ref": "reg/web:1"}
    assert image_field(None, None) is None
    monkeypatch.setenv(USERNAME_ENV, "env-user")
    monkeypatch.setenv(PASSWORD_ENV, "env-pw")
    assert image_field("reg/web:1", None) == {"ref": "reg/web:1",
                                              "credentials": {"username": "env-user", "password": "env-pw"}}
    given = tmp_path / "creds"
    given.write_text("file-user:file-pw")
    assert image_field("reg/web:1", given)["credentials"] == {"username": "file-user", "password": "file-pw"}
    monkeypatch.delenv(PASSWORD_ENV)
    with pytest.raises(typer.Exit):  # half given: a usage error, exit 2
        image_field("reg/web:1", None)


def test_a_manifest_app_may_name_an_image_instead_of_a_command() -> None:
    located = parse_manifest("applications:\n- name: web\n  image: reg.example/web:1\n  instances: 2\n"
                             "- name: api\n  image: {ref: reg.example/api:2, user: app}\n  command: [./api]\n"
                             "tasks:\n- name: job\n  image: reg.example/tools:1\n", "m.yml")
    web, api = located.manifest.applications
    definition = web.definition(credentials={"username": "u", "password": "p"})
    assert definition.command == [] and definition.instances == 2
    assert definition.image is not None and definition.image.credentials is not None
    wire = wanted_wire(definition)
    assert "ports" not in wire and "env" not in wire  # left for the image's config to fill
    assert api.definition().image.user == "app"  # type: ignore[union-attr]
    assert located.manifest.tasks[0].request().image.ref == "reg.example/tools:1"  # type: ignore[union-attr]
    with pytest.raises(ManifestError, match="command"):
        parse_manifest("applications:\n- name: web\n", "m.yml")


def stored(**fields: object) -> DesiredLRP:
    return DesiredLRP.model_validate({
        "process_guid": "web", "instances": 2, "command": ["/bin/sh", "-c", "httpd"], "stack": "docker",
        "env": {"PATH": "/bin", "A": "1"}, "ports": [8080], "created_at": "2026-01-01T00:00:00Z",
        "modification_tag": {"epoch": "e", "index": 0},
        "image": {"ref": "reg.example/web:1", "digest": DIGEST, "working_dir": "/www"}, **fields})


def test_an_image_app_is_sent_again_and_what_the_image_filled_is_not_a_change() -> None:
    current = stored().model_dump(mode="json")
    app = parse_manifest("applications:\n- name: web\n  image: reg.example/web:1\n  instances: 2\n"
                         "  env: {A: '1'}\n", "m.yml").manifest.applications[0]
    plan = plan_app(wanted_wire(app.definition()), current)
    assert (plan.action, plan.changed, plan.repin) == ("update", (), "reg.example/web:1")
    assert "pinned again" in plan.describe()
    moved = parse_manifest("applications:\n- name: web\n  image: reg.example/web:2\n  instances: 3\n",
                           "m.yml").manifest.applications[0]
    plan = plan_app(wanted_wire(moved.definition()), current)
    assert plan.changed == ("image",) and plan.scale == {"instances": (2, 3)}


def test_get_app_writes_the_ref_and_the_pinned_digest_never_credentials() -> None:
    spec = app_spec_of(stored())
    assert spec["image"] == {"ref": "reg.example/web:1", "digest": DIGEST, "working_dir": "/www"}
    # Applied back, it validates (the digest is for people: the BBS pins the ref again).
    text = f"applications:\n- name: web\n  image: {spec['image']}\n  command: [x]\n"
    located = parse_manifest(text, "m.yml")
    assert located.manifest.applications[0].definition().image.digest is None  # type: ignore[union-attr]
