"""Client commands start fast: `vendue --version`, and `vendue apps` up to its argument parsing, import
neither the launcher nor NATS, SQLAlchemy, the placement engine, the servers or the models (what they cost:
most of a second per call); run to the end, a client command imports only the models it reads."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from .cli import COMMAND_MODULES, builds_models_on_first_use
from .cluster import PROJECT_ROOT

# None of these (or their submodules) may be imported before a client command runs.
HEAVY = (
    "nats", "sqlalchemy", "alembic", "aiohttp", "uvicorn", "fastapi", "starlette", "numpy", "cryptography",
    "placement", "auctioneer", "bbs", "rep", "deploy.cluster", "deploy.cluster_processes",
    "deploy.embedded_postgres", "deploy.simulator", "deploy.bbs_client", "common.models.fields", "httpx",
)  # common.models.fields: every model module imports it (the package itself imports none of them)
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


# What a client command may never import, even once it ran: the launcher, NATS, the engine, the servers,
# the database, and httpx's own command line (rich and pygments, which httpx loads when they are installed).
HEAVY_AT_RUN = tuple(h for h in HEAVY if h not in ("deploy.bbs_client", "common.models.fields", "httpx")) + (
    "pygments", "rich.syntax", "rich.progress",
)
# The wire models none of the commands below reads (each costs a client command its building time).
UNREAD_MODELS = ("common.models.auction", "common.models.rep_api", "common.models.token",
                 "common.models.lifecycle", "common.models.rebalance", "common.models.lease")
# `vendue ARGS...` run to the end, then the modules it imported and how it exited, on stderr's last line.
RUN_COMMAND = (
    "import json, sys; from deploy.cli import main; sys.argv = ['vendue', *json.loads(sys.argv[1])]\n"
    "try:\n    main(); code = 0\nexcept SystemExit as exc:\n    code = exc.code\n"
    "models = sys.modules.get('common.models')\n"
    "sys.stderr.write('\\n' + json.dumps({'exit': code, 'modules': sorted(sys.modules),\n"
    "                                      'defer': getattr(models, 'DEFER_BUILD', None)}) + '\\n')"
)


class _EmptyBBS(BaseHTTPRequestHandler):
    """A BBS with nothing in it, as far as the listings go: every list is empty, everything else 404."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        listing = self.path.split("?")[0] in ("/v1/desired_lrps", "/v1/actual_lrps", "/v1/tasks", "/v1/cells")
        body = json.dumps({"items": []} if listing else {"detail": "not found"}).encode()
        self.send_response(200 if listing else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def empty_bbs() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EmptyBBS)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def run_vendue(args: list[str], data_dir: Path) -> tuple[dict[str, Any], str]:
    """`vendue ARGS` in a fresh interpreter: its exit status, every module it imported and whether its
    models were built on first use (`exit`, `modules`, `defer`), and its stdout."""
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "120", "VENDUE_DATA_DIR": str(data_dir)}
    out = subprocess.run([sys.executable, "-c", RUN_COMMAND, json.dumps(args)],
                         capture_output=True, text=True, timeout=60, cwd=PROJECT_ROOT, env=env)
    return json.loads(out.stderr.strip().splitlines()[-1]), out.stdout


def run_client(args: list[str], bbs: str, data_dir: Path) -> tuple[int, list[str], str]:
    """`vendue ARGS --bbs BBS`: its exit status, every module it imported, stdout."""
    report, stdout = run_vendue([*args, "--bbs", bbs], data_dir)
    assert report["defer"] is True, "a client command builds its models as it uses them"
    return report["exit"], report["modules"], stdout


@pytest.mark.parametrize("args, exit_status, printed", [
    pytest.param(["apps"], 0, "0 app(s)", id="apps"),
    pytest.param(["apps", "--json"], 0, "[]", id="apps-json"),
    pytest.param(["tasks"], 0, "0 task(s)", id="tasks"),
    pytest.param(["cells"], 0, "0 cell(s)", id="cells"),
    pytest.param(["instances", "web"], 1, "", id="instances"),  # no app named web: exit 1
    pytest.param(["why", "web", "0"], 1, "", id="why"),  # no explanation (it reads common.models.auction)
    pytest.param(["events"], 1, "", id="events"),
    pytest.param(["push", "web", "-i", "0", "--", "true"], 1, "", id="push"),  # the POST is a 404 here
])
def test_client_commands_run_without_anything_heavy(args: list[str], exit_status: int, printed: str,
                                                    empty_bbs: str, tmp_path: Path) -> None:
    status, modules, stdout = run_client(args, empty_bbs, tmp_path)
    assert (status, stdout.strip()[:len(printed)]) == (exit_status, printed), stdout
    assert "deploy.bbs_client" in modules, "the command should have talked to the BBS"
    assert heavy_in(modules, HEAVY_AT_RUN) == []
    unread = tuple(m for m in UNREAD_MODELS if not (args[0] == "why" and m == "common.models.auction"))
    assert heavy_in(modules, unread) == []


def test_only_client_commands_build_their_models_on_first_use() -> None:
    # FastAPI's request adapters want their models built: a server in this process never defers them.
    deferring = {command for command in COMMAND_MODULES if builds_models_on_first_use(command)}
    assert {"apps", "tasks", "cells", "instances", "push", "events", "why", "tokens"} <= deferring
    assert not deferring & {"bbs", "auctioneer", "rep", "up", "demo", "simulate", "dashboard"}
