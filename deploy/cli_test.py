from __future__ import annotations

import subprocess
import sys

import typer.main

from .cli import COMMAND_MODULES, _command_name, _register, app


def _registered() -> set[str]:
    group = typer.main.get_group(app)
    return set(group.commands)


def test_the_command_table_names_every_command_the_modules_register() -> None:
    _register()
    assert _registered() == set(COMMAND_MODULES), "COMMAND_MODULES must list exactly the registered commands"


def test_the_command_name_is_the_first_argument_unless_it_is_an_option() -> None:
    assert _command_name(["vendue", "rep", "--cells", "3"]) == "rep"
    assert _command_name(["vendue", "--help"]) is None
    assert _command_name(["vendue"]) is None


def test_a_component_command_loads_only_its_own_module() -> None:
    # A fresh interpreter: this test process has imported everything already.
    code = (
        "import sys; from deploy.cli import _register; _register('rep'); "
        "print(sorted(m for m in sys.modules if m.startswith(('deploy.', 'sqlalchemy', 'nats'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    loaded = out.stdout
    assert "deploy.rep_cmd" in loaded, loaded
    for other in ("deploy.bbs_cmd", "deploy.client_cmd", "deploy.simulate_cmd", "sqlalchemy"):
        assert other not in loaded, f"`vendue rep` should not import {other}; loaded: {loaded}"


def test_help_lists_every_command() -> None:
    out = subprocess.run([sys.executable, "-m", "deploy.cli", "--help"], capture_output=True, text=True,
                         timeout=60, check=True)
    for name in COMMAND_MODULES:
        assert name in out.stdout, f"`vendue --help` should list {name}: {out.stdout}"
