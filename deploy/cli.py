"""The `vendue` command: the composition root. Each group of commands lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="vendue",
    help="Vendue: Diego-style auction placement — BBS, auctioneer and rep agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Vendue: Diego-style auction placement — BBS, auctioneer and rep agents."""
    # A callback keeps `vendue` a command group even while only one command module is registered
    # (typer would otherwise run that single command as the whole CLI).


# The module that defines each top-level command. A component process (`vendue bbs`, `vendue rep`, ...)
# imports only its own module: every module at once costs about half a second of CPU per process start
# (nats, SQLAlchemy, the simulator), and a test run starts hundreds of processes. `--help`, no command and
# an unknown name load them all. cli_test.py checks this table against what the modules register.
COMMAND_MODULES: dict[str, str] = {
    "simulate": "deploy.simulate_cmd",
    "bbs": "deploy.bbs_cmd",
    "auctioneer": "deploy.auctioneer_cmd",
    "rep": "deploy.rep_cmd",
    "certs": "deploy.certs_cmd",
    "tokens": "deploy.tokens_cmd",
    **dict.fromkeys(("up", "demo"), "deploy.cluster_cmd"),
    **dict.fromkeys(
        ("push", "scale", "delete", "apps", "instances", "cells", "task", "tasks", "events"),
        "deploy.client_cmd",
    ),
}


def _register(command: str | None = None) -> None:
    """Import the module defining `command` (all modules when None or unknown); each module adds its
    commands to `app` as a side effect of being imported."""
    import importlib

    module = COMMAND_MODULES.get(command or "")
    for name in [module] if module else dict.fromkeys(COMMAND_MODULES.values()):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def _command_name(argv: list[str]) -> str | None:
    """The command a `vendue` command line names (its first argument), or None (`vendue`, `vendue --help`)."""
    return argv[1] if len(argv) > 1 and not argv[1].startswith("-") else None


def main() -> None:
    import sys

    _register(_command_name(sys.argv))
    app()


if __name__ == "__main__":
    # `python -m deploy.cli` runs this file as __main__, a second copy of the module: the command modules
    # register on deploy.cli's `app`, so run that one.
    from deploy.cli import main as _main

    _main()
