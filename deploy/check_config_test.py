"""`vendue auctioneer|rep|bbs --check-config`: 0 and `config ok`, or 2 and one line naming the setting at
fault; nothing is started, bound or created either way."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from deploy.cli import _register, app


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    _register()
    return CliRunner()


@pytest.mark.parametrize(
    ("args", "env", "code", "output"),
    [
        (["auctioneer", "--check-config"], {}, 0, "config ok"),
        (
            [
                "auctioneer",
                "--check-config",
                "--bbs-url",
                "http://bbs-1:8889",
                "--listen",
                "0.0.0.0",
                "--insecure",
            ],
            {},
            0,
            "config ok",
        ),
        (
            ["auctioneer", "--check-config", "--listen", "0.0.0.0"],
            {},
            2,
            "error: --tls-cert (tls_cert): refusing to serve plain HTTP on 0.0.0.0",
        ),
        (
            ["auctioneer", "--check-config", "--bbs-url", "bbs-1"],
            {},
            2,
            "error: --bbs-url (bbs_url): scheme must be http or https",
        ),
        (
            ["auctioneer", "--check-config", "--work-timeout", "0"],
            {},
            2,
            "error: --work-timeout (work_timeout): Input should be greater",
        ),
        (
            ["auctioneer", "--check-config", "--strategy", "nope"],
            {},
            2,
            "error: --strategy (strategy): unknown strategy 'nope'",
        ),
        (["rep", "--check-config", "--zone", "z1", "--cell-id", "cell-1"], {}, 0, "config ok"),
        (["rep", "--check-config", "--zone", ""], {}, 2, "error: --zone (zone): empty"),
        (["rep", "--check-config", "--cells", "3"], {}, 2, "error: --cells (cells): only the sim executor"),
        # Two bad settings from the environment: still one line, the first first.
        (
            ["rep", "--check-config"],
            {"VENDUE_EXECUTOR": "docker", "VENDUE_CONTAINERS": "0"},
            2,
            "error: --containers (containers): ",
        ),
        (
            ["rep", "--check-config", "--nats-url", "nats://u:hunter2@nats:0x"],
            {},
            2,
            "error: --nats-url (nats_url): not a valid URL",
        ),
        # No --insecure flag: the environment's VENDUE_INSECURE decides, for every component.
        (["auctioneer", "--check-config", "--listen", "0.0.0.0"], {"VENDUE_INSECURE": "1"}, 0, "config ok"),
        (["rep", "--check-config", "--listen", "0.0.0.0"], {"VENDUE_INSECURE": "1"}, 0, "config ok"),
        (["bbs", "--check-config", "--listen", "0.0.0.0"], {"VENDUE_INSECURE": "1"}, 0, "config ok"),
        (
            ["rep", "--check-config", "--listen", "0.0.0.0"],
            {"VENDUE_INSECURE": "0"},
            2,
            "error: --tls-cert (tls_cert): refusing",
        ),
    ],
)
def test_check_config(
    runner: CliRunner, tmp_path: Path, args: list[str], env: dict[str, str], code: int, output: str
) -> None:
    argv = [*args, "--data-dir", str(tmp_path)] if args[0] in ("rep", "bbs") else args
    result = runner.invoke(app, argv, env=env)
    assert result.exit_code == code, result.output
    assert result.output.startswith(output), result.output
    assert result.output.count("\n") == 1 and "hunter2" not in result.output
    assert not list(tmp_path.iterdir())  # nothing created
