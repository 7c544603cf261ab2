"""The shared `--check-config` checks: URLs, NATS server lists, hosts, log levels, a component's TLS files."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config_check import (
    first_problem,
    host_problem,
    log_level_problem,
    nats_url_problem,
    serving_tls,
    tls_problem,
    url_list_problem,
    url_problem,
)
from common.tls import TLSOptions, init_ca, issue


@pytest.mark.parametrize("url", ["http://bbs-1:8889", "https://bbs.example.com", "http://[::1]:8889/"])
def test_http_urls_that_pass(url: str) -> None:
    assert url_problem("bbs_url", url) is None


@pytest.mark.parametrize(("urls", "problem"), [
    ("http://bbs-1:8889", None),
    ("http://bbs-1:8889, http://bbs-2:8899/", None),
    ("http://bbs-1:8889,", "bbs_url: empty URL in the list"),
    ("http://bbs-1:8889,bbs-2:8899", "bbs_url: scheme must be http or https, not 'bbs-2'"),
])
def test_http_url_lists(urls: str, problem: str | None) -> None:
    assert url_list_problem("bbs_url", urls) == problem


@pytest.mark.parametrize(
    "urls", ["nats://nats:4222", "nats://vendue:s3cret@nats:4222", "tls://a:4222, nats://token@b:4222"]
)
def test_nats_server_lists_that_pass(urls: str) -> None:
    assert nats_url_problem("nats_url", urls) is None


def test_a_bad_port_is_named_without_the_credentials() -> None:
    problem = nats_url_problem("nats_url", "nats://u:hunter2@nats:4222,nats://u:hunter2@b:x")
    assert problem is not None and problem.startswith("nats_url: not a valid URL")
    assert "hunter2" not in problem


@pytest.mark.parametrize(
    ("host", "ok"), [("0.0.0.0", True), ("::", True), ("rep-z0-a", True), ("a b", False)]
)
def test_hosts_are_judged_by_spelling_alone(host: str, ok: bool) -> None:
    assert (host_problem("listen", host) is None) is ok


def test_log_levels_and_first_problem() -> None:
    assert log_level_problem("INFO") is None
    assert first_problem(None, log_level_problem("loud"), "later") == (
        "log_level: not one of debug, info, warning, error, critical"
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    issue(d, role="rep", name="rep-a", cells=["cell-1"])
    issue(d, role="auctioneer", name="auctioneer")
    (d / "garbage.pem").write_text("not a certificate\n")
    return d


def tls(
    pki: Path, cert: str | None = "rep-a", key: str | None = "rep-a", ca: str | None = "ca"
) -> TLSOptions:
    """The TLS settings for files in `pki` by name (None: not given)."""
    paths = {
        "tls_cert": cert and f"{cert}.pem",
        "tls_key": key and f"{key}-key.pem",
        "tls_ca": ca and f"{ca}.pem",
    }
    return TLSOptions(**{setting: pki / name for setting, name in paths.items() if name})


def test_a_certificate_of_the_role_serves_on_any_address_with_both_contexts(pki: Path) -> None:
    served = serving_tls(tls(pki), "0.0.0.0", "rep")
    assert served is not None and (served.identity.role, served.identity.name) == ("rep", "rep-a")
    assert served.identity.speaks_for("cell-1") and served.files.cert == pki / "rep-a.pem"
    assert served.server is not served.client


def test_plain_http_only_on_loopback_or_insecure(pki: Path) -> None:
    assert serving_tls(TLSOptions(), "127.0.0.1", "rep") is None
    assert serving_tls(TLSOptions(insecure=True), "0.0.0.0", "rep") is None
    assert serving_tls(tls(pki, ca="garbage").model_copy(update={"insecure": True}), "0.0.0.0", "rep") is None


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ((None, None, None), "tls_cert: refusing to serve plain HTTP on 0.0.0.0"),
        (("rep-a", None, None), "tls_key: --tls-cert, --tls-key and --tls-ca go together"),
        (("missing", "rep-a", "ca"), "tls_cert: no such file"),
        (("auctioneer", "auctioneer", "ca"), "tls_cert: "),
        (("rep-a", "auctioneer", "ca"), "tls_cert: cannot load"),
        (("garbage", "rep-a", "ca"), "tls_cert: cannot load"),
        (("rep-a", "rep-a", "garbage"), "tls_ca: cannot load"),
    ],
)
def test_each_tls_problem_names_its_setting(pki: Path, files: tuple[str | None, ...], problem: str) -> None:
    found = tls_problem(tls(pki, *files), "0.0.0.0", "rep")
    assert found is not None and found.startswith(problem), found
    assert "\n" not in found
    if files[0] == "auctioneer":
        assert "states role 'auctioneer'" in found and "the rep needs one issued with --role rep" in found
