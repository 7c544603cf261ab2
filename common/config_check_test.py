"""The shared `--check-config` checks: URLs, NATS server lists, hosts, log levels."""

from __future__ import annotations

import pytest

from common.config_check import (
    first_problem,
    host_problem,
    log_level_problem,
    nats_url_problem,
    url_list_problem,
    url_problem,
)


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


@pytest.mark.parametrize(("host", "ok"), [("0.0.0.0", True), ("::", True), ("rep-z0-a", True), ("a b", False)])
def test_hosts_are_judged_by_spelling_alone(host: str, ok: bool) -> None:
    assert (host_problem("listen", host) is None) is ok


def test_log_levels_and_first_problem() -> None:
    assert log_level_problem("INFO") is None
    assert first_problem(None, log_level_problem("loud"), "later") == (
        "log_level: not one of debug, info, warning, error, critical"
    )
