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
        == "error: --database-url (database_url): unsupported database 'mysql' (use sqlite or postgresql)"
    )
    bad_range = runner.invoke(app, ["bbs", "--check-config", "--presence-ttl", "-1"])
    assert bad_range.exit_code == 2
    assert bad_range.output.strip() == "error: --presence-ttl (presence_ttl): Input should be greater than 0"
    assert not list(tmp_path.iterdir())  # nothing was created or connected to


def test_a_bad_sqlite_synchronous_is_exit_2_with_one_line_by_flag_or_environment(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from deploy.cli import app

    runner = CliRunner()
    expected = "error: --sqlite-synchronous (sqlite_synchronous): Input should be 'full' or 'normal'"
    check = ["bbs", "--check-config", "--data-dir", str(tmp_path)]
    by_flag = runner.invoke(app, [*check, "--sqlite-synchronous", "off"])
    by_env = runner.invoke(app, check, env={"VENDUE_SQLITE_SYNCHRONOUS": "off"})
    for result in (by_flag, by_env):
        assert (result.exit_code, result.output.strip()) == (2, expected), result.output
    good = runner.invoke(app, [*check, "--sqlite-synchronous", "normal"])
    assert (good.exit_code, good.output.strip()) == (0, "config ok")
    assert not list(tmp_path.iterdir())  # nothing was created or connected to


def test_tls_flags_and_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VENDUE_TLS_CA", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("VENDUE_INSECURE", "1")
    settings = _settings(tls_cert=tmp_path / "bbs.pem", tls_key=tmp_path / "bbs-key.pem")
    assert (settings.tls_cert, settings.tls_key, settings.tls_ca) == (
        tmp_path / "bbs.pem", tmp_path / "bbs-key.pem", tmp_path / "ca.pem")
    assert settings.insecure is True and settings.serving_files("0.0.0.0") is None


def test_check_config_validates_the_tls_settings(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from common.tls import init_ca, issue
    from deploy.cli import app

    pki = tmp_path / "pki"
    init_ca(pki)
    issue(pki, role="bbs", name="bbs")
    tls = [
        "--tls-cert",
        str(pki / "bbs.pem"),
        "--tls-key",
        str(pki / "bbs-key.pem"),
        "--tls-ca",
        str(pki / "ca.pem"),
    ]
    runner = CliRunner()
    data = ["--data-dir", str(tmp_path / "data")]
    cases = [
        ([*tls, "--listen", "0.0.0.0"], 0, "config ok"),
        (["--listen", "0.0.0.0", "--insecure"], 0, "config ok"),
        ([], 0, "config ok"),  # plain HTTP on loopback: allowed (and loud when it runs)
        (["--listen", "0.0.0.0"], 2, "error: --tls-cert (tls_cert): refusing to serve plain HTTP on 0.0.0.0"),
        (tls[:2], 2, "error: --tls-key (tls_key): --tls-cert, --tls-key and --tls-ca go together"),
        (["--tls-cert", str(pki / "nope.pem"), *tls[2:]], 2,
         f"error: --tls-cert (tls_cert): no such file {pki / 'nope.pem'}"),
        # The CA's key:
        ([*tls[:3], str(pki / "ca-key.pem"), *tls[4:]], 2, "error: --tls-cert (tls_cert): cannot load"),
    ]
    for args, code, line in cases:
        result = runner.invoke(app, ["bbs", "--check-config", *data, *args])
        assert result.exit_code == code, (args, result.output)
        assert result.output.startswith(line) and len(result.output.splitlines()) == 1, (args, result.output)
    assert not (tmp_path / "data").exists()


def test_check_config_validates_the_key_ring(tmp_path: Path) -> None:
    import base64
    import json

    from typer.testing import CliRunner

    from deploy.cli import app

    keys = tmp_path / "bbs-keys.json"
    keys.write_text(json.dumps({"active": "k1", "keys": {"k1": base64.b64encode(bytes(32)).decode()}}))
    keys.chmod(0o600)
    data = ["--data-dir", str(tmp_path / "data")]
    runner = CliRunner()
    ok = runner.invoke(app, ["bbs", "--check-config", *data, "--encryption-keys-file", str(keys)])
    assert (ok.exit_code, ok.output.strip()) == (0, "config ok")
    keys.chmod(0o640)
    too_open = runner.invoke(app, ["bbs", "--check-config", *data, "--encryption-keys-file", str(keys)])
    assert (too_open.exit_code, too_open.output.strip()) == (2, (
        f"error: --encryption-keys-file (encryption_keys_file): {keys} is mode 0640; it holds keys, so it "
        "must be 0600 or stricter "
        f"(chmod 600 {keys})"))
    malformed = runner.invoke(app, ["bbs", "--check-config", *data],
                              env={"VENDUE_ENCRYPTION_KEYS": '{"active": "k9", "keys": {}}'})
    assert (malformed.exit_code, malformed.output.strip()) == (
        2, 'error: encryption_keys: expected {"active": LABEL, "keys": {LABEL: BASE64, ...}}')
    assert not (tmp_path / "data").exists()  # nothing was created or connected to


def test_rotate_keys_without_a_key_ring_is_refused_before_the_database_is_touched(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from deploy.cli import app

    refused = CliRunner().invoke(app, ["bbs", "--data-dir", str(tmp_path), "rotate-keys"])
    assert (refused.exit_code, refused.output.strip()) == (
        2, "error: --encryption-keys-file (encryption_keys_file): rotate-keys needs the key ring (a file, or "
        "VENDUE_ENCRYPTION_KEYS)")
    assert not list(tmp_path.iterdir())
