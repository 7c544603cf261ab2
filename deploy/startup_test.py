"""Client commands start fast: `vendue --version`, and `vendue apps` up to its argument parsing, import
neither the launcher nor NATS, SQLAlchemy, the placement engine, the servers or the models (what they cost:
most of a second per call)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .cluster import PROJECT_ROOT

# None of these (or their submodules) may be imported before a client command runs.
HEAVY = (
    "nats", "sqlalchemy", "alembic", "aiohttp", "uvicorn", "fastapi", "starlette", "numpy", "cryptography",
    "placement", "auctioneer", "bbs", "rep", "deploy.cluster", "deploy.cluster_processes",
    "deploy.embedded_postgres", "deploy.simulator", "deploy.bbs_client", "common.models", "httpx",
)
# Only the command's own module is imported (no other command module).
OTHER_COMMANDS = ("deploy.bbs_cmd", "deploy.rep_cmd", "deploy.auctioneer_cmd", "deploy.cluster_cmd",
                  "deploy.events_cmd", "deploy.why_cmd", "deploy.tokens_cmd")
# `vendue apps` as far as parsing its arguments: the command resolved and its options read, nothing run.
PARSE_APPS = (
    "import sys; import typer.main; from deploy.cli import _register, app; _register('apps'); "
    "group = typer.main.get_command(app); "
    "ctx = group.make_context('vendue', ['apps']); "
    "params = group.get_command(ctx, 'apps').make_context('apps', ['--bbs', 'http://127.0.0.1:9', '--json'], "
    "parent=ctx).params; "
    "assert params['bbs'] == 'http://127.0.0.1:9' and params['as_json'], params"
)


def imported(argv: list[str]) -> list[str]:
    """The modules a fresh interpreter imports for `argv` (python -X importtime's report)."""
    out = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True,
                         timeout=60, cwd=PROJECT_ROOT, check=True)
    return re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", out.stderr, re.MULTILINE)


def heavy_in(modules: list[str], heavy: tuple[str, ...]) -> list[str]:
    return sorted({m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy)})


@pytest.mark.parametrize("argv", [
    pytest.param(["-m", "deploy.cli", "--version"], id="version"),
    pytest.param(["-m", "deploy.cli", "apps", "--help"], id="apps-help"),
    pytest.param(["-c", PARSE_APPS], id="apps-parse"),
])
def test_client_commands_import_nothing_heavy(argv: list[str]) -> None:
    modules = imported(argv)
    assert "typer" in modules, "the report should list every import (is -X importtime honoured?)"
    assert heavy_in(modules, HEAVY) == []
    assert heavy_in(modules, OTHER_COMMANDS) == []


def test_version_loads_no_command_module() -> None:
    modules = imported(["-m", "deploy.cli", "--version"])
    assert [m for m in modules if m.endswith("_cmd")] == []


def test_the_check_sees_a_heavy_import() -> None:
    # The launcher's own command: the check must notice what it pulls in.
    modules = imported(["-c", "from deploy.cli import _register; _register('up')"])
    assert "deploy.cluster" in heavy_in(modules, HEAVY)
