"""deploy/manifest.py: a manifest's apps and tasks, in push's words; each bad file is ONE error naming the
file, the line and the field; and an app printed back as a manifest reads as the same definition."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.models import DesiredLRP, DesiredLRPCreate

from .manifest import (
    MAX_MANIFEST_BYTES,
    AppSpec,
    ManifestError,
    app_spec_of,
    dump_yaml,
    load_manifest,
    parse_manifest,
)

GOOD = """\
applications:
  - name: web
    command: [python3, -m, http.server]
    instances: 3
    memory_mb: 64
    env:
      GREETING: hello
    health:
      type: http
      path: /healthz
    rollout:
      strategy: canary
      max_in_flight: 25%
      rollback: false
tasks:
  - name: migrate
    command: [./migrate.sh]
"""


def error_of(text: str, source: str = "vendue.yml") -> str:
    with pytest.raises(ManifestError) as caught:
        parse_manifest(text, source)
    message = str(caught.value)
    assert "\n" not in message, f"expected one line, saw {message!r}"
    return message


def test_a_good_manifest_reads_as_push_would_desire_it() -> None:
    located = parse_manifest(GOOD, "vendue.yml")
    web = located.manifest.applications[0]
    definition = web.definition()
    assert (definition.process_guid, definition.instances, definition.memory_mb) == ("web", 3, 64)
    assert definition.disk_mb == 1024 and definition.ports == [8080]  # push's defaults
    assert definition.health_check.type == "http" and definition.health_check.path == "/healthz"
    assert definition.env == {"GREETING": "hello"}
    assert web.rollout.wire() == {"max_in_flight": "25%", "auto_revert": False, "canary": True}
    assert located.manifest.tasks[0].request().task_guid == "migrate"
    assert located.where(("applications", 0, "memory_mb")) == "vendue.yml:5: applications[0].memory_mb"


def test_the_defaults_are_push_defaults() -> None:
    wire = parse_manifest("applications:\n  - name: a\n    command: [x]\n", "f").manifest.applications[0]
    assert wire.definition() == DesiredLRPCreate(process_guid="a", command=["x"])


@pytest.mark.parametrize(("text", "expected"), [
    ("applications:\n  - name: web\n    command: [x]\n    memory_mb: lots\n",
     "vendue.yml:4: applications[0].memory_mb: Input should be a valid integer"),
    ("applications:\n  - name: web\n    command: [x]\n\n    colour: blue\n",
     "vendue.yml:5: applications[0].colour: Extra inputs are not permitted"),
    ("applications:\n  - name: a\n    command: [x]\n  - name: b\n    command: [x]\n    health:\n"
     "      type: http\n      every: 5\n",
     "vendue.yml:8: applications[1].health.every: Extra inputs are not permitted"),
    ("applications:\n  - command: [x]\n    memory_mb: 3\n",
     "vendue.yml:2: applications[0].name: Field required"),
    ("applications:\n  - name: a\n    command: [x]\n    rollout:\n      max_in_flight: 0\n",
     "vendue.yml:5: applications[0].rollout.max_in_flight:"),
    ("applications:\n  - name: a\n    command: [x]\n    rollout:\n      max_in_flight: 150%\n",
     "vendue.yml:5: applications[0].rollout.max_in_flight:"),
    ("applications:\n  - name: a\n    command: []\n", "vendue.yml:3: applications[0].command:"),
    ("applications:\n  - name: a\n    name: b\n", "vendue.yml:3: invalid YAML: key 'name' given twice"),
    ("applications:\n  - name: a\n   command: [x\n", "vendue.yml:3: invalid YAML:"),
    ("- just\n- a list\n", "vendue.yml:1: (the file): expected a mapping"),
    ("apps:\n  - name: a\n", "vendue.yml:1: apps: Extra inputs are not permitted"),
    ("tasks:\n  - name: t\n    command: [x]\n    detach: true\n",
     "vendue.yml:4: tasks[0].detach: Extra inputs are not permitted"),
    ("applications:\n  - name: a\n    command: [x]\n  - name: a\n    command: [y]\n",
     "vendue.yml:1: applications: Value error, name 'a' appears twice"),
    ("applications:\n  - name: a\n    command: [x]\n    env:\n      PORT: 8080\n",
     "vendue.yml:5: applications[0].env.PORT: Input should be a valid string"),
])
def test_a_bad_file_is_one_error_with_its_file_line_and_field(text: str, expected: str) -> None:
    assert error_of(text).startswith(expected), f"expected {expected!r}..., saw {error_of(text)!r}"


def test_what_only_the_wire_model_checks_still_names_the_line() -> None:
    text = "applications:\n  - name: a\n    command: [x]\n    objective: 'nonsense('\n"
    assert error_of(text).startswith("vendue.yml:4: applications[0].objective: ")


def test_several_bad_fields_are_counted_on_the_one_line() -> None:
    text = "applications:\n  - name: a\n    command: [x]\n    memory_mb: x\n    disk_mb: y\n"
    assert error_of(text) == ("vendue.yml:4: applications[0].memory_mb: Input should be a valid integer, "
                              "unable to parse string as an integer (and 1 more)")


def test_unreadable_too_large_and_binary_files_are_one_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match=r"missing\.yml: cannot read"):
        load_manifest(tmp_path / "missing.yml")
    big = tmp_path / "big.yml"
    big.write_bytes(b"#" * (MAX_MANIFEST_BYTES + 1))
    with pytest.raises(ManifestError, match="larger than"):
        load_manifest(big)
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ManifestError, match="not UTF-8"):
        load_manifest(binary)


def test_an_app_printed_as_a_manifest_reads_back_as_the_same_definition() -> None:
    definition = parse_manifest(GOOD, "f").manifest.applications[0].definition()
    stored = DesiredLRP.model_validate({**definition.model_dump(mode="json"),
                                        "created_at": "2026-01-01T00:00:00Z",
                                        "modification_tag": {"epoch": "e", "index": 1}})
    spec = app_spec_of(stored)
    assert "rollout" not in spec and "ports" not in spec and "stack" not in spec  # defaults left out
    again = parse_manifest(dump_yaml({"applications": [spec]}), "g").manifest.applications[0].definition()
    assert again == definition


def test_the_health_check_takes_the_wire_fields_and_its_timings() -> None:
    text = ("applications:\n  - name: a\n    command: [x]\n    health:\n      type: http\n"
            "      interval_s: 10\n      invocation_timeout_s: 2\n      failure_threshold: 3\n"
            "      timeout_s: 120\n")
    check = parse_manifest(text, "f").manifest.applications[0].definition().health_check
    assert (check.interval_s, check.invocation_timeout_s, check.failure_threshold, check.timeout_s) == (
        10, 2, 3, 120)
    bad = text.replace("interval_s: 10", "interval_s: 0")
    assert error_of(bad).startswith("vendue.yml:6: applications[0].health.interval_s: Input should be")


def test_exec_enabled_is_sent_only_when_the_file_says() -> None:
    left_out = AppSpec(name="web", command=["serve"]).definition()
    assert left_out.exec_enabled is True and "exec_enabled" not in left_out.model_fields_set  # kept as is
    assert AppSpec(name="web", command=["serve"], exec_enabled=False).definition().exec_enabled is False
    wire = {**left_out.model_dump(mode="json"), "created_at": "2026-01-01T00:00:00Z",
            "modification_tag": {"epoch": "e"}}
    assert "exec_enabled" not in app_spec_of(DesiredLRP.model_validate(wire))  # on: the default, not shown
    assert app_spec_of(DesiredLRP.model_validate({**wire, "exec_enabled": False}))["exec_enabled"] is False
