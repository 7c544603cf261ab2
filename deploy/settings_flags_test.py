"""The component commands' flags are their settings: one flag per setting (none for a secret), its default
the setting's, and a flag not given leaves the setting to its VENDUE_* variable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
from pydantic import BaseModel, Field, SecretStr
from typer.core import TyperOption
from typer.testing import CliRunner

from auctioneer.settings import AuctioneerSettings
from bbs.settings import BBSSettings
from rep.settings import RepSettings

from .cli import _register, app
from .settings_flags import ENV_NOTE, env_of, given_settings, settings_flags, shown, with_settings_flags

COMPONENTS = {"bbs": BBSSettings, "auctioneer": AuctioneerSettings, "rep": RepSettings}
# The flags that are not a setting: what the command does, not how the component is set up.
COMMAND_FLAGS = {"bbs": {"check_config"}, "auctioneer": {"check_config"}, "rep": {"check_config", "sim"}}
SECRETS = {"bbs": {"nats_token", "encryption_keys"}, "auctioneer": {"nats_token"}, "rep": {"nats_token"}}


def _options(command: str) -> list[TyperOption]:
    _register(command)
    group = typer.main.get_group(app)
    return [p for p in group.commands[command].params if isinstance(p, TyperOption)]


@pytest.mark.parametrize("command", COMPONENTS)
def test_every_setting_has_exactly_one_flag_with_the_settings_default(command: str) -> None:
    model = COMPONENTS[command]
    options = _options(command)
    names = [option.name for option in options]
    assert sorted(set(names) - set(model.model_fields)) == sorted(COMMAND_FLAGS[command])
    for setting, field in model.model_fields.items():
        if setting in SECRETS[command]:
            assert setting not in names, f"{setting} is a secret: an environment variable only"
            continue
        assert names.count(setting) == 1, f"{setting}: {names.count(setting)} flags"
        (option,) = [o for o in options if o.name == setting]
        # Not given, a flag passes nothing: the VENDUE_* variable, else the setting's default, decides.
        assert option.default in (None, False), (setting, option.default)
        default = field.get_default(call_default_factory=True)
        assert option.help is not None and option.help.startswith(field.description or "")
        # The environment variable is named only where the flag's name does not say it (ENV_NOTE).
        env = f"VENDUE_{setting.upper()}"
        said = [] if env == env_of(option.opts[0]) else [env]
        said += [f"default {shown(default)}"] if shown(default) is not None else []
        expected = f"\\[{'; '.join(said)}]" if said else (field.description or "")
        assert option.help.endswith(expected), (setting, option.help, expected)


@pytest.mark.parametrize("command", COMPONENTS)
def test_every_flag_has_help(command: str) -> None:
    for option in _options(command):
        assert option.help and not option.help.startswith("["), f"--{option.name} has no description"


def test_the_shared_flags_are_named_as_before() -> None:
    names = {opt for option in _options("rep") for opt in option.opts}
    assert {"--stack", "--tag", "--optional-tag", "--volume-driver", "--label", "--memory-limit",
            "--tls-cert", "--max-body-bytes", "--insecure", "--cgroup-fs", "--sim"} <= names
    assert "--no-memory-limit" in {opt for o in _options("rep") for opt in o.secondary_opts}


class _Example(BaseModel):
    port: int = Field(default=8889, description="Port.")
    labels: dict[str, str] = Field(default_factory=dict, description="k=v.",
                                   json_schema_extra={"flag": "--label"})
    insecure: bool = Field(default=False, description="No TLS.")
    limit: bool = Field(default=True, description="Cap.")
    tags: list[str] = Field(default_factory=list, description="Tags.")
    token: SecretStr | None = Field(default=None, json_schema_extra={"flag": None})
    data_dir: Path = Field(default=Path(".x"), description="Data.")


def test_flags_not_given_are_left_out_and_given_ones_are_settings() -> None:
    flags = settings_flags(_Example, role="x")
    assert [f.name for f in flags] == ["--port", "--label", "--insecure", "--limit", "--tags", "--data-dir"]
    nothing: dict[str, Any] = {"port": None, "labels": [], "insecure": False, "limit": None, "tags": [],
                               "data_dir": None}
    assert given_settings(flags, nothing) == {}
    given = given_settings(flags, {**nothing, "port": 1, "labels": ["a=b"], "limit": False, "tags": ("t",)})
    assert given == {"port": 1, "labels": {"a": "b"}, "limit": False, "tags": ["t"]}


def test_a_secret_without_a_flag_marker_is_refused() -> None:
    class Leaky(BaseModel):
        password: SecretStr | None = None

    with pytest.raises(TypeError, match="secret"):
        settings_flags(Leaky, role="x")


def test_a_generated_command_passes_the_flags_given_as_settings() -> None:
    seen: list[dict[str, Any]] = []
    example = typer.Typer()

    @example.command()
    @with_settings_flags(_Example, role="x")
    def run(settings_given: dict[str, Any] | None = None) -> None:
        seen.append(dict(settings_given or {}))

    result = CliRunner().invoke(example, ["--port", "7", "--label", "k=v", "--no-limit"])
    assert result.exit_code == 0, result.output
    assert seen == [{"port": 7, "labels": {"k": "v"}, "limit": False}]
    bad = CliRunner().invoke(example, ["--label", "novalue"])
    assert bad.exit_code == 2 and "expected k=v" in bad.output


def test_a_mixins_settings_are_a_panel_and_a_command_may_make_more() -> None:
    flags = {f.setting: f for f in settings_flags(RepSettings, role="rep", panels={"Cell": ("zone",)})}
    assert (flags["tls_cert"].panel, flags["max_body_bytes"].panel) == ("TLS", "Serving limits")
    assert (flags["zone"].panel, flags["port"].panel) == ("Cell", None)
    with pytest.raises(ValueError, match="no setting colour"):
        settings_flags(RepSettings, role="rep", panels={"Cell": ("colour",)})


@pytest.mark.parametrize("command", COMPONENTS)
def test_help_is_readable_in_80_columns(command: str) -> None:
    # Nothing is cut off (rich ends what does not fit in its column with "…": an environment variable's
    # name, a path), the flags' names leave their help at least a third of the width (the rep's took 56
    # columns when its --no-memory-limit widened every flag's), and the environment variables are said once.
    out = subprocess.run([sys.executable, "-m", "deploy.cli", command, "--help"], capture_output=True,
                         text=True, timeout=60, check=True,
                         env={**os.environ, "COLUMNS": "80", "TERM": "dumb"}).stdout
    assert " ".join(ENV_NOTE.split()) in " ".join(out.split())
    continued = [len(m.group(1)) for m in re.finditer(r"^(│ +)\S", out, re.MULTILINE)]
    assert continued and max(continued) <= 45, out
    assert "…" not in out, out
