"""deploy/prometheus: the alert rules and compose's Prometheus, checked without Prometheus (no promtool).

The rules parse as Prometheus rule groups, each with a severity, and their expressions name only series of
the README's metrics table (tests/e2e/test_metrics.py checks a running cluster exports every one of
those). Compose's Prometheus scrapes every Vendue service on its port over HTTPS with a reader
certificate the certs service made for it, and loads these rules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.readme_metrics import metrics_table
from tests.support.compose import kind_of, listen_port, vendue_services

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
SEVERITIES = {"warning", "page"}
# What a PromQL expression holds besides series names: functions (followed by "("), aggregation and
# set keywords, label names in `by (...)` and in matchers, ranges and numbers.
KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_NUMBER = re.compile(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+)?\b")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def series_named(expr: str) -> set[str]:
    """The series names in a PromQL expression (what this repository's rules use of PromQL)."""
    bare = _NUMBER.sub(" ", _MATCHERS.sub(" ", _GROUPING.sub(" ", expr)))
    names = set()
    for match in _NAME.finditer(bare):
        following = bare[match.end() :].lstrip()
        if match.group() not in KEYWORDS and not following.startswith("("):
            names.add(match.group())
    return names


def test_series_named_finds_the_series_and_nothing_else() -> None:
    assert series_named('max by (lease) (LockHeld{lease="x"}) < 1') == {"LockHeld"}
    assert series_named("max_over_time(ConvergenceLRPDuration[15m]) >= 10e9") == {"ConvergenceLRPDuration"}
    assert series_named("rate(a_total[5m]) / on (job) b") == {"a_total", "b"}


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_the_alert_rules_parse_and_name_only_series_of_the_readme_table() -> None:
    document = yaml.safe_load(RULES.read_text())
    assert [set(group) for group in document["groups"]] == [{"name", "rules"}] * len(document["groups"])
    known = {name for row in metrics_table() for name in row.names()}
    found = rules()
    assert found
    for rule in found:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in SEVERITIES, rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule
        named = series_named(rule["expr"])
        assert named and named <= known, f"{rule['alert']}: {sorted(named - known)} not in the README's table"


def test_the_rules_hold_diegos_thresholds() -> None:
    """State fetch 2 s warning, 5 s page; convergence 10 s, 20 s (nanoseconds); LRPsMissing > 0 for 5 min."""
    by_expr = {(rule["expr"], rule.get("for"), rule["labels"]["severity"]) for rule in rules()}
    assert {
        ("max_over_time(AuctioneerFetchStatesDuration[5m]) >= 2e9", None, "warning"),
        ("max_over_time(AuctioneerFetchStatesDuration[5m]) >= 5e9", None, "page"),
        ("max_over_time(ConvergenceLRPDuration[15m]) >= 10e9", None, "warning"),
        ("max_over_time(ConvergenceLRPDuration[15m]) >= 20e9", None, "page"),
        ("max(LRPsMissing) > 0", "5m", "page"),
    } <= by_expr, by_expr


def test_compose_prometheus_scrapes_every_vendue_service_over_https_and_loads_the_rules(
    services: dict[str, dict[str, Any]],  # noqa: F811 - the compose file's, a fixture
) -> None:
    config = yaml.safe_load(CONFIG.read_text())
    prometheus = services["prometheus"]
    mounted = {target: volume for target, (volume, _) in mounts_with_binds(prometheus).items()}
    assert mounted["/etc/prometheus"] == "./deploy/prometheus"
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    scraped: dict[str, str] = {}
    for job in config["scrape_configs"]:
        assert job["scheme"] == "https", job["job_name"]
        tls = job["tls_config"]
        assert {tls["ca_file"], tls["cert_file"], tls["key_file"]} == {
            "/certs/ca.pem",
            "/certs/cert.pem",
            "/certs/key.pem",
        }
        for target in (t for static in job["static_configs"] for t in static["targets"]):
            scraped[target] = job["job_name"]
    expected = {
        f"{name}:{listen_port(name, s)}": kind_of(name, s) for name, s in vendue_services(services).items()
    }
    assert scraped == expected


def mounts_with_binds(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Mount target -> (volume or host path, read-only)."""
    found = {}
    for entry in service.get("volumes") or []:
        source, target, *options = str(entry).split(":")
        found[target] = (source, "ro" in options)
    return found


@pytest.mark.slow  # the certs script
def test_prometheus_gets_a_reader_certificate_of_its_own(
    services: dict[str, dict[str, Any]],  # noqa: F811 - the compose file's, a fixture
    volumes: Path,  # noqa: F811 - what its certs service made, a fixture
) -> None:
    from common.tls import TLSFiles

    prometheus = services["prometheus"]
    volume, read_only = mounts_with_binds(prometheus)["/certs"]
    assert read_only
    readers = [
        name
        for name, s in services.items()
        if name not in ("certs", "prometheus") and volume in {v for v, _ in mounts_with_binds(s).values()}
    ]
    assert not readers, f"{volume} is mounted by {readers} too"
    files = TLSFiles(volumes / volume / "cert.pem", volumes / volume / "key.pem", volumes / volume / "ca.pem")
    identity = files.identity()
    assert identity is not None and identity.role == "reader", identity
    assert (files.key.stat().st_mode & 0o777) == 0o600
