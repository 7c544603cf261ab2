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
    main()
