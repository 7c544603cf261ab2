from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.core import TyperArgument
from typer.testing import CliRunner

from .cli import COMMAND_MODULES, HELP_PANELS, _command_name, _register, app
from .cli_style import OneLineErrorsCommand, OneLineErrorsGroup


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
    for other in ("deploy.bbs_cmd", "deploy.client_cmd", "deploy.simulator.simulate_cmd", "sqlalchemy"):
        assert other not in loaded, f"`vendue rep` should not import {other}; loaded: {loaded}"


def test_help_lists_every_command() -> None:
    out = subprocess.run([sys.executable, "-m", "deploy.cli", "--help"], capture_output=True, text=True,
                         timeout=60, check=True)
    for name in COMMAND_MODULES:
        assert name in out.stdout, f"`vendue --help` should list {name}: {out.stdout}"


def _every_command() -> list[tuple[str, Any]]:
    """(`vendue push`, its click command) for every command and group, subcommands included."""
    _register()
    found: list[tuple[str, Any]] = []

    def walk(path: str, command: Any) -> None:
        found.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            walk(f"{path} {name}", sub)

    walk("vendue", typer.main.get_group(app))
    return found


def test_every_command_uses_the_shared_error_and_help_style() -> None:
    for path, command in _every_command():
        assert isinstance(command, OneLineErrorsCommand | OneLineErrorsGroup), (
            f"`{path}` should be made with cls=OneLineErrorsCommand (or OneLineErrorsGroup) from "
            f"deploy/cli_style.py; it is a {type(command).__name__}")


def test_usage_lines_name_arguments_in_capitals() -> None:
    for path, command in _every_command():
        with typer.Context(command, info_name=path) as ctx:
            usage = " ".join(command.collect_usage_pieces(ctx))
        arguments = [p.metavar for p in command.get_params(ctx) if isinstance(p, TyperArgument)]
        assert "{" not in usage and all(a and a == a.upper() for a in arguments), (
            f"expected `{path}` to name its arguments in capitals; its usage is {usage!r}")


def test_help_lists_the_commands_in_their_groups_in_order() -> None:
    _register()
    panelled = {command for commands in HELP_PANELS.values() for command in commands}
    assert set(COMMAND_MODULES) <= panelled, f"commands in no help panel: {set(COMMAND_MODULES) - panelled}"
    out = subprocess.run([sys.executable, "-m", "deploy.cli", "--help"], capture_output=True, text=True,
                         timeout=60, check=True, env={**os.environ, "COLUMNS": "100", "TERM": "dumb"}).stdout
    titles = [panel for panel in HELP_PANELS if any(c in COMMAND_MODULES for c in HELP_PANELS[panel])]
    at = [out.find(f"─ {title} ") for title in titles]
    assert -1 not in at and at == sorted(at), f"expected the panels {titles} in this order: {out}"


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.stdout) == (0, f"vendue {version('vendue')}\n"), result.output


@pytest.mark.parametrize(("words", "expected"), [
    ("vendue ce", {"cells", "certs"}),
    ("vendue cells re", {"remove"}),
    ("vendue push web --me", {"--memory"}),
])
def test_shell_completion_sees_every_command(words: str, expected: set[str]) -> None:
    # A fresh `vendue` process as the shell runs it: the command line only in the environment.
    env = {**os.environ, "_VENDUE_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - 1)}
    out = subprocess.run([sys.executable, "-c", "from deploy.cli import main; main()"], capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0 and expected <= set(out.stdout.split()), (
        f"expected completions {expected} for {words!r}, saw {out.stdout!r} {out.stderr!r}")


@pytest.mark.parametrize("args", [
    ["bogus"], ["--bogus"], ["push", "web", "--bogus"], ["push"], ["tasks", "--state"], ["cells", "remove"],
    ["task", "bogus"], ["simulate", "--seed", "x"], ["certs", "issue"], ["rep", "--port", "many"],
])
def test_a_usage_error_is_one_line_and_exit_2(args: list[str]) -> None:
    _register()
    result = CliRunner().invoke(app, args)
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (
        f"expected one error line and exit 2 for {args}, saw exit {result.exit_code}: {result.output!r}")


# The commands without --json: the components log (JSON lines, common/logging.py) rather than print, and
# `up`/`demo` narrate a cluster for people until Ctrl-C (scripts read `up`'s <data-dir>/cluster.json);
# `exec` prints the remote command's own output.
NO_JSON = {"vendue bbs", "vendue auctioneer", "vendue rep", "vendue up", "vendue demo", "vendue exec"}


def test_every_command_that_prints_takes_json() -> None:
    for path, command in _every_command():
        if path in NO_JSON or (getattr(command, "commands", None) and not command.invoke_without_command):
            continue
        options = {opt for param in command.params for opt in getattr(param, "opts", ())}
        assert "--json" in options, f"`{path}` prints something: it should take --json"


def _readme_commands() -> set[str]:
    """The commands the README's command table names: in each row's first column, every `code span`'s
    leading words up to the first argument or option (`task cancel GUID` -> `task cancel`)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    table = readme[readme.index("| command | what it does |"):]
    table = table[:table.index("\n\n")]
    named = set()
    for row in table.splitlines()[2:]:
        first_column = row.split(" | ")[0]
        for span in re.findall(r"`([^`]+)`", first_column):
            words = itertools.takewhile(lambda w: re.fullmatch(r"[a-z][a-z-]*", w), span.split())
            named.add(" ".join(words))
    return named


def test_the_readme_command_table_lists_exactly_the_commands_of_help() -> None:
    # A group is in it by its subcommands, unless it runs something itself (`vendue cells`, `vendue bbs`).
    commands = {path.removeprefix("vendue ") for path, command in _every_command()[1:]
                if not getattr(command, "commands", None) or command.invoke_without_command}
    table = _readme_commands()
    assert commands - table == set(), f"commands missing from the README's table: {commands - table}"
    unknown = table - commands
    assert unknown == set(), f"the README's table names commands that do not exist: {unknown}"
