"""`vendue auctioneer --check-config`'s checks: one line naming the setting; sane settings pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from auctioneer.config_check import config_problem
from auctioneer.settings import AuctioneerSettings
from common.tls import TLSFiles, init_ca, issue


def test_defaults_and_a_compose_style_setup_are_sane() -> None:
    assert config_problem(AuctioneerSettings(_env_file=None)) is None
    compose = AuctioneerSettings(
        bbs_url="http://bbs-1:8889,http://bbs-2:8889",
        listen="0.0.0.0",
        insecure=True,
        transport="nats",
        nats_url="nats://vendue:secret@nats:4222,nats://nats-2:4222",
        strategy="binpack",
    )
    assert config_problem(compose) is None


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"bbs_url": "bbs-1:8889"}, "bbs_url: scheme must be http or https"),
        ({"bbs_url": "http://:8889"}, "bbs_url: no host"),
        ({"bbs_url": "http://bbs:88889"}, "bbs_url: not a valid URL"),
        ({"bbs_url": "http://bbs-1:8889,"}, "bbs_url: empty URL in the list"),
        ({"bbs_url": "http://bbs-1:8889,http://:1"}, "bbs_url: no host"),
        ({"nats_url": "nats://a:4222,"}, "nats_url: empty server"),
        ({"nats_url": "http://nats:4222"}, "nats_url: scheme must be nats or tls or ws or wss"),
        ({"listen": "0.0.0.0:8890"}, "listen: '0.0.0.0:8890' is neither"),
        ({"log_level": "loud"}, "log_level: not one of"),
        ({"engine": "turbo"}, "engine: unknown engine 'turbo'"),
        ({"strategy": "cheapest"}, "strategy: unknown strategy 'cheapest' (expected one of diego"),
        (
            {"cell_state_timeout": 30, "work_timeout": 30, "auction_timeout": 60},
            "auction_timeout: 60.0s is not above cell_state_timeout + work_timeout",
        ),
    ],
)
def test_each_problem_names_its_setting(settings: dict[str, object], problem: str) -> None:
    found = config_problem(AuctioneerSettings(_env_file=None, **settings))
    assert found is not None and found.startswith(problem), found
    assert "\n" not in found


def test_nats_credentials_are_not_repeated_in_a_problem() -> None:
    found = config_problem(AuctioneerSettings(nats_url="nats://vendue:hunter2@nats:99999"))
    assert found is not None and found.startswith("nats_url: not a valid URL")
    assert "hunter2" not in found


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    issue(d, role="auctioneer", name="auctioneer")
    issue(d, role="rep", name="cell-1", cells=["cell-1"])
    return d


def tls(pki: Path, name: str = "auctioneer") -> dict[str, Path]:
    """The three TLS settings for the certificate `name` in `pki`."""
    files = TLSFiles.in_dir(pki, name)
    return {"tls_cert": files.cert, "tls_key": files.key, "tls_ca": files.ca}


def test_an_auctioneer_certificate_serves_on_any_address(pki: Path) -> None:
    assert config_problem(AuctioneerSettings(_env_file=None, listen="0.0.0.0", **tls(pki))) is None


def test_the_tls_check_is_the_shared_one_for_the_role_auctioneer(pki: Path) -> None:
    """common.config_check tests each TLS problem; here: the auctioneer asks for its role, on its listen
    address."""
    found = config_problem(AuctioneerSettings(_env_file=None, listen="0.0.0.0", **tls(pki, "cell-1")))
    assert found is not None and found.startswith("tls_cert: ") and "states role 'rep'" in found, found
    assert "--role auctioneer" in found
    found = config_problem(AuctioneerSettings(_env_file=None, listen="0.0.0.0"))
    assert found is not None and found.startswith("tls_cert: refusing to serve plain HTTP on 0.0.0.0"), found
