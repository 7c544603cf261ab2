"""`vendue certs init|issue|nats-config`, in process. That the NATS configuration really admits the
certificates is tested against the real nats-server (tests/deploy/compose_test.py, tests/nats/)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cryptography import x509
from typer.testing import CliRunner

from common.tls import identity_of_file
from common.transport.nats_server import CONFIG_FILE, user_name

from .certs_cmd import app

pytestmark = pytest.mark.timeout(60)


def vendue(*args: str | Path):
    return CliRunner().invoke(app, [str(arg) for arg in args])


def one_error(result) -> str:
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: "), line
    return line


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    directory = tmp_path / "pki"
    assert vendue("certs", "init", directory).exit_code == 0
    for args in (
        ["--role", "bbs", "--name", "bbs-1"],
        ["--role", "rep", "--name", "rep-a", "--cell", "cell-a"],
    ):
        result = vendue("certs", "issue", directory, *args)
        assert result.exit_code == 0, result.output
    return directory


def users(config: Path) -> dict[str, dict]:
    return {
        user["user"]: user["permissions"] for user in json.loads(config.read_text())["authorization"]["users"]
    }


def test_nats_config_admits_every_client_certificate_with_its_roles_permissions(pki: Path) -> None:
    result = vendue("certs", "nats-config", pki, "--san", "nats", "--listen", "0.0.0.0:4333", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    config = pki / CONFIG_FILE  # the default
    assert (out["config"], out["users"]) == (str(config), ["bbs bbs-1", "rep rep-a"])
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # it names every identity
    written = json.loads(config.read_text())
    assert (written["host"], written["port"]) == ("0.0.0.0", 4333)
    assert written["tls"]["verify_and_map"] is True and written["tls"]["handshake_first"] == "auto"
    assert written["tls"]["cert_file"] == str((pki / "nats.pem").resolve())
    assert "no_auth_user" not in written
    admitted = users(config)
    assert set(admitted) == {"CN=bbs-1,OU=bbs,O=vendue", "CN=rep-a,OU=rep,O=vendue"}  # not the server's own
    assert admitted["CN=rep-a,OU=rep,O=vendue"]["subscribe"]["allow"] == [
        "vendue.cells.state.rep-a",
        "vendue.rep.rep-a.>",
    ]
    server = identity_of_file(pki / "nats.pem")
    assert server is not None and user_name(server) not in admitted
    names = (
        x509.load_pem_x509_certificate((pki / "nats.pem").read_bytes())
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value.get_values_for_type(x509.DNSName)
    )
    assert "nats" in names  # --san: the name the components dial


def test_nats_config_keeps_the_servers_certificate_and_picks_up_a_new_one(pki: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "etc" / "nats.conf"
    assert vendue("certs", "nats-config", pki, "--san", "nats", "--out", elsewhere).exit_code == 0
    server_cert = (pki / "nats.pem").read_bytes()
    assert (
        vendue("certs", "issue", pki, "--role", "rep", "--name", "rep-b", "--cell", "cell-b").exit_code == 0
    )
    result = vendue("certs", "nats-config", pki, "--san", "nats", "--out", elsewhere)
    assert result.exit_code == 0, result.output
    assert (pki / "nats.pem").read_bytes() == server_cert  # issued when missing only
    assert "CN=rep-b,OU=rep,O=vendue" in users(elsewhere)
    assert json.loads(elsewhere.read_text())["port"] == 4222  # --listen's default
    assert not (pki / CONFIG_FILE).exists()


@pytest.mark.parametrize("listen", ["4222", "nats:", ":4222", "0.0.0.0:0", "0.0.0.0:65536", "bad host:4222"])
def test_nats_config_refuses_a_listen_address_that_is_not_host_and_port(pki: Path, listen: str) -> None:
    assert one_error(vendue("certs", "nats-config", pki, "--listen", listen)).startswith(
        "error: --listen (listen): ")
    assert not (pki / "nats.pem").exists() and not (pki / CONFIG_FILE).exists()


def test_nats_config_takes_an_ipv6_listen_address(pki: Path) -> None:
    assert vendue("certs", "nats-config", pki, "--listen", "[::]:4222").exit_code == 0
    assert json.loads((pki / CONFIG_FILE).read_text())["host"] == "::"


def test_nats_config_refuses_a_server_certificate_without_the_name_asked_for(pki: Path) -> None:
    assert vendue("certs", "nats-config", pki).exit_code == 0  # issued without --san nats
    line = one_error(vendue("certs", "nats-config", pki, "--san", "nats"))
    assert line.startswith("error: san: ") and "does not name nats" in line
    assert vendue("certs", "nats-config", pki, "--san", "localhost", "--san", "127.0.0.1").exit_code == 0


def test_nats_config_refuses_a_directory_without_client_certificates_or_ca(tmp_path: Path) -> None:
    assert "no CA there" in one_error(vendue("certs", "nats-config", tmp_path / "nothing"))
    assert vendue("certs", "init", tmp_path / "ca-only").exit_code == 0
    assert "no client certificates" in one_error(vendue("certs", "nats-config", tmp_path / "ca-only"))
    assert not (tmp_path / "ca-only" / "nats.pem").exists()


def test_issue_refuses_a_rep_without_cells(pki: Path) -> None:
    assert one_error(vendue("certs", "issue", pki, "--role", "rep", "--name", "rep-x")).startswith(
        "error: cell: "
    )


def test_init_writes_the_ca_and_its_private_key_once(tmp_path: Path) -> None:
    result = vendue("certs", "init", tmp_path / "pki", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out == {"ca": str(tmp_path / "pki" / "ca.pem"), "ca_key": str(tmp_path / "pki" / "ca-key.pem")}
    assert stat.S_IMODE(Path(out["ca_key"]).stat().st_mode) == 0o600
    assert "a CA is already there" in one_error(vendue("certs", "init", tmp_path / "pki"))
