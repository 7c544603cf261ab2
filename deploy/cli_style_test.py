from __future__ import annotations

from typing import Annotated

import typer
from typer.testing import CliRunner

from .cli_style import USAGE_ERROR, OneLineErrorsCommand, OneLineErrorsGroup, bad_input, fail, name_flags

# A CLI of its own, with the shapes the real commands have: an argument, short and long options, a group.
cli = typer.Typer(cls=OneLineErrorsGroup)


@cli.callback()
def _group(listen: Annotated[str, typer.Option("--listen")] = "") -> None:
    pass


@cli.command(cls=OneLineErrorsCommand)
def push(
    name: Annotated[str, typer.Argument()],
    memory_mb: Annotated[int, typer.Option("--memory", "-m")] = 1,
    tags: Annotated[list[str] | None, typer.Option("--tag")] = None,
    problem: Annotated[str, typer.Option("--problem")] = "",
) -> None:
    """Answers `--problem` as a 422's problems would be ("field: why; field: why")."""
    fail("; ".join(name_flags(problem.split("; "), {"placement_tags": "tags", "process_guid": "name"})),
         USAGE_ERROR)


@cli.command(cls=OneLineErrorsCommand)
def serve(problem: Annotated[str, typer.Option("--problem")] = "") -> None:
    bad_input(problem)


def run(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stderr.splitlines()


def test_a_wire_field_is_named_with_the_flag_that_sets_it() -> None:
    assert run("push", "web", "--problem", "memory_mb: must be at least 1") == (
        2, ["error: -m/--memory (memory_mb): must be at least 1"])
    assert run("push", "web", "--problem", "placement_tags.0: too long; process_guid: bad") == (
        2, ["error: --tag (placement_tags.0): too long; NAME (process_guid): bad"])


def test_a_field_no_flag_sets_stays_as_it_is() -> None:
    assert run("push", "web", "--problem", "env: not allowed") == (2, ["error: env: not allowed"])
    assert run("push", "web", "--problem", "no field here") == (2, ["error: no field here"])


def test_a_setting_of_the_group_above_is_named_with_its_flag() -> None:
    assert run("--listen", "x", "serve", "--problem", "listen: not an address") == (
        2, ["error: --listen (listen): not an address"])


def test_usage_errors_are_one_line() -> None:
    for args in (["push"], ["push", "web", "-m", "many"], ["bogus"], ["--bogus"], ["push", "web", "--nope"]):
        code, lines = run(*args)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, code, lines)
