"""The `vendue` command: the composition root. Each group of commands lives in its own module."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .cli_style import OneLineErrorsGroup

# `vendue --help` lists the commands in these groups, in this order (cli_test.py checks that every command
# is in one).
HELP_PANELS: dict[str, tuple[str, ...]] = {
    "Cluster": ("up", "demo"),
    "Components": ("bbs", "auctioneer", "rep"),
    "Apps and tasks": ("push", "apply", "get", "scale", "restart", "rollout", "delete", "apps", "instances",
                       "task", "tasks", "blobs"),
    "Cells": ("cells", "rebalance"),
    "Observe": ("app", "events", "logs", "exec", "exec-enable", "exec-disable", "why", "dashboard"),
    "Security": ("certs", "tokens"),
    "Simulation": ("simulate",),
}
_PANEL_OF = {command: panel for panel, commands in HELP_PANELS.items() for command in commands}
_ORDER = {command: n for n, command in enumerate(_PANEL_OF)}


class VendueGroup(OneLineErrorsGroup):
    """The root group: its commands in their help panels, in HELP_PANELS's order (whatever order the
    modules registered them in)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(super().list_commands(ctx), key=lambda name: _ORDER.get(name, len(_ORDER)))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None and cmd_name in _PANEL_OF:
            command.rich_help_panel = _PANEL_OF[cmd_name]  # type: ignore[attr-defined]  # typer's commands have it
        return command


app = typer.Typer(
    name="vendue",
    help="Vendue: Diego-style auction placement — BBS, auctioneer and rep agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=VendueGroup,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"vendue {version('vendue')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                           help="Print the version and exit.")] = False,
) -> None:
    """Vendue: Diego-style auction placement — BBS, auctioneer and rep agents."""
    # A callback keeps `vendue` a command group even while only one command module is registered
    # (typer would otherwise run that single command as the whole CLI).


# The module that defines each top-level command. A component process (`vendue bbs`, `vendue rep`, ...)
# imports only its own module: every module at once costs about half a second of CPU per process start
# (nats, SQLAlchemy, the simulator), and a test run starts hundreds of processes. `--help`, no command and
# an unknown name load them all (so does shell completion: its command line is in the environment, and
# `vendue` alone names no command). cli_test.py checks this table against what the modules register.
COMMAND_MODULES: dict[str, str] = {
    "simulate": "deploy.simulator.simulate_cmd",
    "bbs": "deploy.bbs_cmd",
    "auctioneer": "deploy.auctioneer_cmd",
    "rep": "deploy.rep_cmd",
    "certs": "deploy.certs_cmd",
    "tokens": "deploy.tokens_cmd",
    "why": "deploy.why_cmd",
    "app": "deploy.app_cmd",
    "dashboard": "deploy.dashboard_cmd",
    **dict.fromkeys(("up", "demo"), "deploy.cluster_cmd"),
    **dict.fromkeys(
        ("push", "scale", "delete", "apps", "instances", "task", "tasks"), "deploy.client_cmd"
    ),
    **dict.fromkeys(("apply", "get"), "deploy.apply_cmd"),
    **dict.fromkeys(("rollout", "restart"), "deploy.rollout_cmd"),
    "events": "deploy.events_cmd",
    "logs": "deploy.logs_cmd",
    **dict.fromkeys(("exec", "exec-enable", "exec-disable"), "deploy.exec_cmd"),
    "cells": "deploy.cells_cmd",  # `cells` itself is in deploy.client_cmd, which it imports
    "rebalance": "deploy.rebalance_cmd",
    "blobs": "deploy.blobs_cmd",
}


# The commands that only talk to the BBS (no server in this process): their wire models are built as they
# are first used (common.models.DEFER_BUILD), a few of them, not the hundred.
CLIENT_MODULES = frozenset({"deploy.client_cmd", "deploy.cells_cmd", "deploy.events_cmd", "deploy.why_cmd",
                            "deploy.rebalance_cmd", "deploy.tokens_cmd", "deploy.blobs_cmd",
                            "deploy.logs_cmd", "deploy.apply_cmd", "deploy.rollout_cmd",
                            "deploy.app_cmd", "deploy.exec_cmd"})


def builds_models_on_first_use(command: str | None) -> bool:
    """Whether `vendue COMMAND` defers building the wire models: a client command does, a server never."""
    return COMMAND_MODULES.get(command or "") in CLIENT_MODULES


def _register(command: str | None = None) -> None:
    """Import the module defining `command` (all modules when None or unknown); each module adds its
    commands to `app` as a side effect of being imported."""
    module = COMMAND_MODULES.get(command or "")
    for name in [module] if module else dict.fromkeys(COMMAND_MODULES.values()):
        try:
            __import__(name)  # not importlib.import_module: `python -X importtime` reports only this one
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def _command_name(argv: list[str]) -> str | None:
    """The command a `vendue` command line names (its first argument), or None (`vendue`, `vendue --help`)."""
    return argv[1] if len(argv) > 1 and not argv[1].startswith("-") else None


def _needs_no_command(argv: list[str]) -> bool:
    """`vendue --version`: the root's eager option answers before any command is looked at, so no command
    module is loaded (every one of them costs a client command's whole start-up budget)."""
    return _command_name(argv) is None and "--version" in argv[1:] and "--help" not in argv[1:]


def main() -> None:
    import sys

    # httpx imports its own command line (rich, pygments, click: a fifth of a client command's start-up)
    # whenever those are installed; a None entry makes that import fail, and httpx falls back to a stub.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    if not _needs_no_command(sys.argv):
        command = _command_name(sys.argv)
        if builds_models_on_first_use(command):
            import os

            import common.models

            common.models.DEFER_BUILD = True
            # pydantic looks for plugins (importlib.metadata's entry points, a tenth of a client command's
            # start-up) when it builds the first model; a client command of ours runs none.
            os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
        _register(command)
    # Named `vendue` however it was started (`python -m deploy.cli`): in usage lines, and for shell
    # completion, which reads its command line from _VENDUE_COMPLETE and COMP_WORDS.
    app(prog_name="vendue")


if __name__ == "__main__":
    # `python -m deploy.cli` runs this file as __main__, a second copy of the module: the command modules
    # register on deploy.cli's `app`, so run that one.
    from deploy.cli import main as _main

    _main()
