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


def _register() -> None:
    # Imported for their side effect of adding commands to `app`; each module owns its commands.
    import importlib

    for name in (
        "deploy.simulate_cmd",
        "deploy.bbs_cmd",
        "deploy.auctioneer_cmd",
        "deploy.rep_cmd",
        "deploy.cluster_cmd",
        "deploy.client_cmd",
    ):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise


def main() -> None:
    _register()
    app()


if __name__ == "__main__":
    # `python -m deploy.cli` runs this file as __main__, a second copy of the module: the command modules
    # register on deploy.cli's `app`, so run that one.
    from deploy.cli import main as _main

    _main()
