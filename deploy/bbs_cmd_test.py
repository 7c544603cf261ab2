"""`vendue bbs` settings: VENDUE_* environment variables, overridden by flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.bbs_cmd import _settings


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VENDUE_PRESENCE_TTL", "2")
    monkeypatch.setenv("VENDUE_AUCTIONEER_URL", "http://env:1")
    monkeypatch.setenv("VENDUE_DATA_DIR", str(tmp_path))
    settings = _settings(presence_ttl=None, auctioneer_url="http://flag:2", port=0)
    assert settings.presence_ttl == 2
    assert settings.auctioneer_url == "http://flag:2"
    assert settings.port == 0
    assert settings.resolved_database_url() == f"sqlite+aiosqlite:///{tmp_path.resolve() / 'bbs.db'}"


def test_invalid_setting_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import typer

    with pytest.raises(typer.Exit) as exc:
        _settings(presence_ttl=-1.0)
    assert exc.value.exit_code == 2


def test_check_config_exits_0_or_2_with_one_line_naming_the_setting(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from deploy.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["bbs", "--check-config", "--data-dir", str(tmp_path)])
    assert (ok.exit_code, ok.output.strip()) == (0, "config ok")
    bad_url = runner.invoke(app, ["bbs", "--check-config", "--database-url", "mysql://u@h/db"])
    assert bad_url.exit_code == 2
    assert (
        bad_url.output.strip()
        == "error: database_url: unsupported database 'mysql' (use sqlite or postgresql)"
    )
    bad_range = runner.invoke(app, ["bbs", "--check-config", "--presence-ttl", "-1"])
    assert bad_range.exit_code == 2
    assert bad_range.output.strip() == "error: presence_ttl: Input should be greater than 0"
    assert not list(tmp_path.iterdir())  # nothing was created or connected to
