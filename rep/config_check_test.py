"""`vendue rep --check-config`'s checks: one line naming the setting; sane settings pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from common.tls import TLSFiles, init_ca, issue
from rep.config_check import config_problem
from rep.settings import RepSettings


def test_defaults_and_a_compose_style_cell_are_sane() -> None:
    # Whether the default isolation is possible depends on the machine (root, cgroups): tested below.
    assert config_problem(RepSettings(isolation="none")) is None
    compose = RepSettings(
        bbs_url="http://bbs-1:8889,http://bbs-2:8889",
        listen="0.0.0.0",
        advertise_host="rep-z0-a",
        cell_id="cell-z0-a",
        zone="z0",
        executor="process",
        transport="nats",
        nats_url="nats://vendue:secret@nats:4222",
        memory_mb=2048,
        disk_mb=4096,
        isolation="none",
        insecure=True,  # on 0.0.0.0 without TLS files: only when asked for
    )
    assert config_problem(compose) is None
    assert config_problem(RepSettings(executor="sim", cells=100, zones=2)) is None


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"bbs_url": "bbs-1:8889"}, "bbs_url: scheme must be http or https"),
        ({"bbs_url": "http://bbs-1:port"}, "bbs_url: not a valid URL"),
        ({"bbs_url": "http://bbs-1:8889,,http://bbs-2:8889"}, "bbs_url: empty URL in the list"),
        ({"nats_url": "nats://a:4222, ,nats://b:4222"}, "nats_url: empty server"),
        ({"listen": "any", "insecure": True}, None),  # a host name: resolving it is the runtime's business
        ({"listen": "0.0.0.0 "}, "listen: '0.0.0.0 ' is neither"),
        ({"advertise_host": "rep_z0"}, "advertise_host: 'rep_z0' is neither"),
        ({"log_level": "verbose"}, "log_level: not one of"),
        ({"cell_id": "-cell"}, "cell_id: '-cell' is not a guid"),
        ({"cell_id": "cell 1"}, "cell_id: 'cell 1' is not a guid"),
        ({"zone": " "}, "zone: empty"),
        ({"cells": 4}, "cells: only the sim executor"),
        ({"stacks": ["cflinuxfs4", ""]}, "stacks: empty name"),
        ({"placement_tags": [" "]}, "placement_tags: empty name"),
    ],
)
def test_each_problem_names_its_setting(settings: dict[str, object], problem: str | None) -> None:
    found = config_problem(RepSettings(**settings))
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found
        assert "\n" not in found


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        ({"presence_ttl": 0}, "presence_ttl"),
        ({"evacuation_timeout": -1}, "evacuation_timeout"),
        ({"executor": "docker"}, "executor"),
        ({"memory_mb": 0}, "memory_mb"),
        ({"disk_mb": 0}, "disk_mb"),
        ({"containers": 0}, "containers"),
        ({"port": 70000}, "port"),
    ],
)
def test_single_value_ranges_are_refused_by_the_settings_themselves(
    settings: dict[str, object], setting: str
) -> None:
    with pytest.raises(ValidationError) as exc:
        RepSettings(**settings)
    assert exc.value.errors()[0]["loc"] == (setting,)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    init_ca(d)
    issue(d, role="rep", name="rep-a", cells=["cell-1"])
    issue(d, role="auctioneer", name="auctioneer")
    return d


def tls(pki: Path, name: str = "rep-a") -> dict[str, Path]:
    """The three TLS settings for the certificate `name` in `pki`."""
    files = TLSFiles.in_dir(pki, name)
    return {"tls_cert": files.cert, "tls_key": files.key, "tls_ca": files.ca}


def test_a_rep_certificate_serves_on_any_address(pki: Path) -> None:
    assert config_problem(RepSettings(_env_file=None, listen="0.0.0.0", **tls(pki))) is None


def test_the_tls_check_is_the_shared_one_for_the_role_rep(pki: Path) -> None:
    """common.config_check tests each TLS problem; here: the rep asks for its role, on its listen address."""
    found = config_problem(RepSettings(_env_file=None, listen="0.0.0.0", **tls(pki, "auctioneer")))
    assert found is not None and found.startswith("tls_cert: ") and "states role 'auctioneer'" in found, found
    found = config_problem(RepSettings(_env_file=None, listen="0.0.0.0"))
    assert found is not None and found.startswith("tls_cert: refusing to serve plain HTTP on 0.0.0.0"), found


def test_the_rep_id_is_the_certificates_cn_else_the_flag_else_the_cell_or_the_sim_prefix(pki: Path) -> None:
    from common.config_check import serving_tls
    from rep.main import rep_id_of

    assert rep_id_of(RepSettings(_env_file=None, cell_id="cell-7"), None) == "cell-7"
    assert rep_id_of(RepSettings(_env_file=None, executor="sim", cells=3, cell_id="sim0"), None) == "sim0"
    assert rep_id_of(RepSettings(_env_file=None, cell_id="cell-7", rep_id="vm-7"), None) == "vm-7"
    secure = RepSettings(_env_file=None, cell_id="cell-1", rep_id="ignored", **tls(pki))
    assert rep_id_of(secure, serving_tls(secure, secure.listen, "rep")) == "rep-a"
    with pytest.raises(ValidationError):
        RepSettings(_env_file=None, rep_id="a b")


def test_a_rep_that_cannot_isolate_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    problem = config_problem(RepSettings())
    assert problem is not None and problem.startswith(
        "cannot isolate instances: not running as root (uid 1000)"
    )
    assert "--isolation none" in problem and "\n" not in problem
    assert config_problem(RepSettings(isolation="none")) is None
    assert config_problem(RepSettings(executor="sim")) is None


@pytest.mark.parametrize(("setting", "value", "problem"), [
    ("app_uid_range", "5", "app_uid_range"),
    ("app_uid_range", "9-3", "app_uid_range"),
    ("cgroup_parent", "vendue", "cgroup_parent"),
    ("cgroup_parent", "/a/../b", "cgroup_parent"),
    ("pids_limit", 0, "pids_limit"),
    ("isolation", "chroot", "isolation"),
])
def test_bad_isolation_settings_name_the_setting(setting: str, value: object, problem: str) -> None:
    with pytest.raises(ValidationError) as raised:
        RepSettings(**{setting: value})
    assert raised.value.errors()[0]["loc"] == (problem,)


def test_an_artifact_ca_must_be_a_readable_pem_bundle(pki: Path, tmp_path: Path) -> None:
    ca = TLSFiles.in_dir(pki, "rep-a").ca
    assert config_problem(RepSettings(_env_file=None, isolation="none", artifact_ca=ca)) is None
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")
    for path in (bogus, tmp_path / "missing.pem"):
        found = config_problem(RepSettings(_env_file=None, isolation="none", artifact_ca=path))
        assert found is not None and found.startswith(f"artifact_ca: {path} is not a readable PEM"), found
