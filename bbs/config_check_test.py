"""`--check-config`'s checks: each problem is one line naming the setting; sane settings pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from bbs.config_check import config_problem
from bbs.settings import BBSSettings
from bbs.store.database import UnsupportedDatabase, database_url
from common.tls import TLSFiles, init_ca, issue


def test_defaults_and_both_databases_are_sane() -> None:
    assert config_problem(BBSSettings()) is None
    assert config_problem(BBSSettings(database_url="postgresql+asyncpg://bbs:secret@db:5432/bbs")) is None


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"database_url": "not a url"}, "database_url: not a database URL"),
        ({"database_url": "mysql://u@h/db"}, "database_url: unsupported database 'mysql'"),
        (
            {"database_url": "postgresql+psycopg2://u@h/db"},
            "database_url: postgresql is reached through asyncpg",
        ),
        ({"database_url": "postgresql://u@h"}, "database_url: the PostgreSQL URL names no database"),
        ({"database_url": "postgresql://u@h:70000/db"}, "database_url: port 70000 out of range"),
        ({"database_url": "sqlite+aiosqlite://"}, "database_url: an SQLite database must be a file"),
        ({"auctioneer_url": "auctioneer:8890"}, "auctioneer_url: scheme must be http or https"),
        ({"auctioneer_url": "http://:8890"}, "auctioneer_url: no host"),
        ({"auctioneer_url": "http://a:99999"}, "auctioneer_url: not a valid URL"),
        ({"nats_url": "nats://a:4222,"}, "nats_url: empty server"),
        ({"nats_url": "nats://a:4222,http://b:4222"}, "nats_url: scheme must be nats or tls or ws or wss"),
        ({"listen": "not an address!"}, "listen: 'not an address!' is neither"),
        ({"log_level": "loud"}, "log_level: not one of"),
        ({"crash_backoff_min": 60, "crash_backoff_max": 30}, "crash_backoff_min: 60.0s exceeds"),
        ({"kick_task": 60, "expire_pending_task": 30}, "kick_task: 60.0s is not below expire_pending_task"),
        ({"insecure_registry": ["http://reg:5000"]}, "insecure_registry: expected HOST or HOST:PORT"),
        ({"registry_ca": "/nonexistent/ca.pem"}, "registry_ca: cannot load /nonexistent/ca.pem"),
        ({"forget_cell_after": 5, "presence_ttl": 10}, "forget_cell_after: 5.0s is below presence_ttl"),
        ({"http_timeout": 20, "lease_ttl": 15}, "http_timeout: 20.0s is not below lease_ttl"),
    ],
)
def test_each_problem_names_its_setting(settings: dict[str, object], problem: str) -> None:
    found = config_problem(BBSSettings(**settings))
    assert found is not None and found.startswith(problem), found
    assert "\n" not in found


@pytest.mark.parametrize(
    "url",
    ["postgresql+asyncpg://u:hunter2@h:notaport/db", "postgresql+asyncpg://u:hunter2@[::1/db", "   "],
)
def test_an_unparseable_database_url_is_a_problem_that_does_not_repeat_it(url: str) -> None:
    found = config_problem(BBSSettings(database_url=url))
    assert found is not None and found.startswith("database_url: not a database URL")
    assert "hunter2" not in found


def test_database_urls_get_their_async_driver() -> None:
    assert str(database_url("postgres://u@h:5432/db")) == "postgresql+asyncpg://u@h:5432/db"
    assert str(database_url("postgresql://u@h/db")) == "postgresql+asyncpg://u@h/db"
    assert str(database_url("sqlite:////var/lib/bbs.db")) == "sqlite+aiosqlite:////var/lib/bbs.db"
    assert str(database_url("sqlite+aiosqlite:///bbs.db")) == "sqlite+aiosqlite:///bbs.db"
    with pytest.raises(UnsupportedDatabase):
        database_url("sqlite+pysqlite:///bbs.db")


def test_the_tls_check_is_the_shared_one_for_the_role_bbs(tmp_path: Path) -> None:
    """common.config_check tests each TLS problem; here: the BBS asks for its role, on its listen address."""
    init_ca(tmp_path)
    for role in ("bbs", "admin"):
        issue(tmp_path, role=role, name=role)

    def tls(name: str) -> dict[str, Path]:
        files = TLSFiles.in_dir(tmp_path, name)
        return {"tls_cert": files.cert, "tls_key": files.key, "tls_ca": files.ca}

    assert config_problem(BBSSettings(listen="0.0.0.0", **tls("bbs"))) is None
    found = config_problem(BBSSettings(listen="0.0.0.0", **tls("admin")))
    assert found is not None and found.startswith("tls_cert: ") and "states role 'admin'" in found, found
    assert "--role bbs" in found
    found = config_problem(BBSSettings(listen="0.0.0.0"))
    assert found is not None and found.startswith("tls_cert: refusing to serve plain HTTP on 0.0.0.0"), found
