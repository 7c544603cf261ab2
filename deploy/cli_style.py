"""How every `vendue` command reports errors and names its arguments: one style for all of them.

Errors: exactly one `error: ...` line on stderr; exit 2 for bad input (a usage error too: an unknown
option, `-i abc`, a missing NAME — click's usage box would be several lines), exit 1 when something is
unreachable, not found or failed. Bad input names the CLI flag as well as the wire field the flag sets:
`error: -m/--memory (memory_mb): Input should be greater than or equal to 1`.

Help: arguments by their names in capitals (`NAME`, `[NAME]` when optional), option values by their type in
capitals (`INTEGER`, `PATH`), flags without one. Every command and group of the CLI uses these classes
(`cls=OneLineErrorsCommand`, `cls=OneLineErrorsGroup`); cli_test.py checks it.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from .terminal_text import plain

USAGE_ERROR = 2
FAILURE = 1


def fail(message: str, code: int = FAILURE) -> NoReturn:
    """The one error line, and the exit status: FAILURE (1) unless told USAGE_ERROR (2)."""
    # The message may quote a BBS's answer, or what an app or rep wrote (terminal_text.py says why).
    typer.echo(f"error: {plain(message)}", err=True)
    raise typer.Exit(code)


def _usage_error_types() -> tuple[type[Exception], ...]:
    # Recent typer vendors click (typer._click), older typer uses click itself: typer's own BadParameter
    # derives from whichever UsageError it raises.
    return tuple({cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError"})


USAGE_ERRORS = _usage_error_types()


def _one_line(exc: Exception) -> NoReturn:
    message = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
    fail(message, USAGE_ERROR)


# --- flags for wire fields ------------------------------------------------------------------------


def flag_label(param: Any) -> str:
    """How the command line spells a parameter: `-m/--memory` for an option (short names first), `NAME` for
    an argument."""
    if isinstance(param, TyperOption):
        return "/".join(sorted(param.opts, key=lambda opt: (opt.startswith("--"), opt)))
    return str(param.metavar or param.name).upper()


def _current_params() -> list[Any]:
    """The parameters of the command running now, then of the groups above it (`vendue bbs --listen X
    rotate-keys`: rotate-keys's, then bbs's); none outside a command."""
    # As with the usage errors: the context is on recent typer's vendored click's stack, or on click's.
    for module in ("typer._click.globals", "click.globals"):
        with contextlib.suppress(ImportError):
            ctx = importlib.import_module(module).get_current_context(silent=True)
            if ctx is not None:
                params = []
                while ctx is not None:
                    params += ctx.command.params
                    ctx = ctx.parent
                return params
    return []


def name_flags(problems: Iterable[str], wire_to_param: Mapping[str, str] = {}) -> list[str]:
    """`memory_mb: why` -> `-m/--memory (memory_mb): why` for the running command: the flag is the
    parameter of the same name as the wire field, or as `wire_to_param` maps it (`placement_tags` ->
    `tags`); the most specific prefix of a dotted field wins (`health_check.path`, then `health_check`).
    A field no flag sets stays as it is."""
    params = {param.name: param for param in reversed(_current_params())}  # the innermost wins
    named = []
    for problem in problems:
        field, sep, why = problem.partition(": ")
        parts = field.split(".")
        for n in range(len(parts), 0, -1):
            prefix = ".".join(parts[:n])
            param = params.get(wire_to_param.get(prefix, prefix))
            if sep and param is not None:
                named.append(f"{flag_label(param)} ({field}): {why}")
                break
        else:
            named.append(problem)
    return named


def bad_input(problem: str, wire_to_param: Mapping[str, str] = {}) -> NoReturn:
    """One `field: why` problem of the input, with the flag that set the field (`name_flags`); exit 2."""
    fail(name_flags([problem], wire_to_param)[0], USAGE_ERROR)


# --- the classes every command uses ---------------------------------------------------------------


def _display_in_capitals(params: list[Any], ctx: Any) -> list[Any]:
    """Arguments as their name in capitals; option values as their type in capitals (`<int>` -> `INT`;
    choices stay as they are typed, `process|sim`); flags bare."""
    for param in params:
        if param.metavar is not None:
            continue
        if isinstance(param, TyperArgument):
            param.metavar = param.name.upper()
        elif isinstance(param, TyperOption):
            if hasattr(param, "display_type"):
                label = param.display_type(ctx).strip("<>")
            else:  # typer before 0.29, whose options are click's own
                label = param.type.name  # type: ignore[attr-defined]  # typer's stubs hide click's `type`
            # Repeatable or ranged: the help says so.
            label = label.removeprefix("list[").removesuffix("]").removesuffix(" range")
            param.metavar = "" if param.is_flag else label if "|" in label else label.upper()
    return params


def _usage_pieces(command: Any, ctx: Any) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.get_params(ctx):
        if isinstance(param, TyperArgument):
            metavar = param.metavar or (param.name or "").upper()
            name = metavar + ("..." if param.nargs != 1 and not metavar.endswith("...") else "")
            pieces.append(name if param.required else f"[{name}]")
    return pieces


class _OneLineUsageErrors:
    """Usage errors (an unknown option, `-i abc`, a missing NAME) as one `error: ...` line and exit 2,
    instead of click's usage box: scripts read one line, people read the field name."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)  # type: ignore[misc]
        except USAGE_ERRORS as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # `vendue task` alone: the help, as usual
                raise
            _one_line(exc)

    def get_params(self, ctx: Any) -> list[Any]:
        return _display_in_capitals(super().get_params(ctx), ctx)  # type: ignore[misc]


class OneLineErrorsCommand(_OneLineUsageErrors, TyperCommand):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return _usage_pieces(self, ctx)


class OneLineErrorsGroup(_OneLineUsageErrors, TyperGroup):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*_usage_pieces(self, ctx), self.subcommand_metavar]

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except USAGE_ERRORS as exc:  # `vendue task bogus`
            _one_line(exc)
