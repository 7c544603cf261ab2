"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

What `docker compose up` would find out the slow way is found here: every Vendue service's command
passes the component's own `--check-config` with that service's environment; every URL names a
service that exists, of the right kind, on the port it listens on; credentials agree with the nats
and postgres services; the topology is two BBS, two auctioneers and four reps in two zones; every
service has a health check, and the Vendue one answers right to what /ping says; the nats service's
command, run by the local nats-server binary, admits the services' credentials and no one else.

Compose's `${VAR:-default}` interpolation is applied with every variable unset (as on a machine with
no .env file), so the defaults themselves must agree.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from fnmatch import fnmatch
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
COMPONENTS = ("bbs", "auctioneer", "rep")
# Which kind of service each URL setting must point at.
URL_TARGETS = {
    "VENDUE_BBS_URL": "bbs",
    "VENDUE_AUCTIONEER_URL": "auctioneer",
    "VENDUE_NATS_URL": "nats",
    "VENDUE_DATABASE_URL": "postgres",
}
DEFAULT_PORTS = {"http": 80, "https": 443, "nats": 4222, "postgresql": 5432, "postgresql+asyncpg": 5432}
POSTGRES_PORT = 5432
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?-)(?P<default>[^}]*))?\}|\$(?P<bare>\w+)")


# --- loading ---------------------------------------------------------------------------------------


def interpolate(value: Any) -> Any:
    """Compose's variable substitution, every variable taken as unset: a default is required."""
    if isinstance(value, dict):
        return {key: interpolate(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group("op") is None:
            name = match.group("name") or match.group("bare")
            raise AssertionError(f"${{{name}}} has no default: `docker compose up` would need it set")
        return match.group("default")

    return _VARIABLE.sub(substitute, value)


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    document = interpolate(yaml.safe_load(COMPOSE_FILE.read_text()))
    return document["services"]


def component(service: dict[str, Any]) -> str | None:
    """bbs, auctioneer or rep for a service running the Vendue image; None for the others."""
    command = service.get("command") or []
    if service.get("build") is None or not command:
        return None
    return command[0] if command[0] in COMPONENTS else None


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the KEY=VALUE list form
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def of_kind(services: dict[str, dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if kind_of(name, s) == kind}


def kind_of(name: str, service: dict[str, Any]) -> str:
    return component(service) or name


def listen_port(name: str, service: dict[str, Any]) -> int:
    """The port a service listens on inside the compose network."""
    kind = kind_of(name, service)
    if kind in COMPONENTS:
        return int(
            environment(service).get("VENDUE_PORT") or _settings_class(kind).model_fields["port"].default
        )
    if kind == "nats":
        command = service.get("command") or []
        for flag in ("--port", "-p"):
            if flag in command:
                return int(command[command.index(flag) + 1])
        return 4222
    if kind == "postgres":
        return int(environment(service).get("PGPORT", POSTGRES_PORT))
    raise AssertionError(f"{name}: unknown kind of service")


def _settings_class(kind: str) -> Any:
    from auctioneer.service.settings import AuctioneerSettings
    from bbs.settings import BBSSettings
    from rep.settings import RepSettings

    return {"bbs": BBSSettings, "auctioneer": AuctioneerSettings, "rep": RepSettings}[kind]


def image_environment() -> dict[str, str]:
    """The VENDUE_* variables the Dockerfile's ENV lines set (the service's environment adds to them)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[4:]):
                key, _, value = pair.partition("=")
                if key.startswith("VENDUE_"):
                    env[key] = value
    return env


def nats_auth(services: dict[str, dict[str, Any]]) -> tuple[str, str]:
    command = services["nats"]["command"]
    return command[command.index("--user") + 1], command[command.index("--pass") + 1]


def urls_of(service: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(setting, URL) for every URL setting of a Vendue service (NATS: each server of the list)."""
    for setting, value in environment(service).items():
        if setting in URL_TARGETS:
            for url in value.split(","):
                yield setting, url.strip()


# --- the Dockerfile --------------------------------------------------------------------------------


def test_the_image_runs_vendue_as_a_non_root_user() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    assert [line for line in lines if line.startswith("FROM ")] == ["FROM python:3.11-slim"]
    entrypoints = [line for line in lines if line.startswith("ENTRYPOINT ")]
    assert entrypoints and json.loads(entrypoints[-1].removeprefix("ENTRYPOINT ")) == ["vendue"]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert any(line.startswith("RUN pip install") for line in lines)


def test_dockerignore_keeps_what_pip_install_needs() -> None:
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]]
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for needed in ["pyproject.toml", pyproject["project"]["readme"], *packages]:
        assert not any(fnmatch(needed, pattern) for pattern in patterns), f".dockerignore drops {needed}"


# --- every Vendue service ----------------------------------------------------------------------------


@pytest.mark.slow  # eight interpreter start-ups
def test_every_vendue_service_passes_its_components_check_config(services: dict[str, dict[str, Any]]) -> None:
    vendue = {name: s for name, s in services.items() if component(s) is not None}
    assert vendue
    host_env = {key: value for key, value in os.environ.items() if not key.startswith("VENDUE_")}
    # Started together and then awaited: eight interpreter start-ups share the wait.
    running = {}
    for name, service in vendue.items():
        env = {**host_env, **image_environment(), **environment(service)}
        argv = [sys.executable, "-m", "deploy.cli", *service["command"], "--check-config"]
        running[name] = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for name, process in running.items():
        output, _ = process.communicate(timeout=120)
        assert (process.returncode, output.strip()) == (0, "config ok"), f"{name}: {output}"


def test_every_vendue_service_uses_the_one_image(services: dict[str, dict[str, Any]]) -> None:
    vendue = [s for s in services.values() if component(s) is not None]
    assert {(s["image"], s["build"]) for s in vendue} == {(vendue[0]["image"], ".")}


def test_every_url_names_a_service_of_the_right_kind_on_its_port(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for setting, url in urls_of(service):
            parts = urlsplit(url)
            target = parts.hostname
            assert target in services, f"{name}: {setting} names {target!r}, not a service"
            assert kind_of(target, services[target]) == URL_TARGETS[setting], f"{name}: {setting} -> {target}"
            port = parts.port or DEFAULT_PORTS[parts.scheme]
            assert port == listen_port(target, services[target]), f"{name}: {setting} port {port}"
    needed = {
        "bbs": {"VENDUE_NATS_URL", "VENDUE_DATABASE_URL", "VENDUE_AUCTIONEER_URL"},
        "auctioneer": {"VENDUE_NATS_URL", "VENDUE_BBS_URL"},
        "rep": {"VENDUE_NATS_URL", "VENDUE_BBS_URL"},
    }
    for name, service in services.items():
        kind = component(service)
        if kind is not None:  # left out, a setting would fall back to a loopback default
            assert {setting for setting, _ in urls_of(service)} == needed[kind], name


def test_every_rep_and_auctioneer_can_fail_over_to_every_bbs(services: dict[str, dict[str, Any]]) -> None:
    bbs_replicas = {name for name, s in services.items() if component(s) == "bbs"}
    assert len(bbs_replicas) >= 2
    for name, service in services.items():
        if component(service) in ("rep", "auctioneer"):
            listed = {urlsplit(url).hostname for setting, url in urls_of(service) if setting == "VENDUE_BBS_URL"}
            assert listed == bbs_replicas, f"{name} lists {sorted(listed)}: losing a BBS must not cut it off"


def test_nats_credentials_agree_with_the_nats_service(services: dict[str, dict[str, Any]]) -> None:
    user, password = nats_auth(services)
    assert user and password
    nats_urls = [
        (name, url)
        for name, s in services.items()
        for setting, url in urls_of(s)
        if setting == "VENDUE_NATS_URL"
    ]
    assert len(nats_urls) == len([s for s in services.values() if component(s)])  # every component
    for name, url in nats_urls:
        parts = urlsplit(url)
        assert (unquote(parts.username or ""), unquote(parts.password or "")) == (user, password), name


def test_database_credentials_agree_with_the_postgres_service(services: dict[str, dict[str, Any]]) -> None:
    postgres = environment(services["postgres"])
    expected = (
        postgres["POSTGRES_USER"],
        postgres["POSTGRES_PASSWORD"],
        postgres.get("POSTGRES_DB", postgres["POSTGRES_USER"]),
    )
    for name, service in of_kind(services, "bbs").items():
        parts = urlsplit(environment(service)["VENDUE_DATABASE_URL"])
        assert parts.scheme.startswith("postgresql"), name
        given = (unquote(parts.username or ""), unquote(parts.password or ""), parts.path.lstrip("/"))
        assert given == expected, name


# --- topology and health ---------------------------------------------------------------------------------


def test_two_bbs_two_auctioneers_and_four_reps_in_two_zones(services: dict[str, dict[str, Any]]) -> None:
    assert len(of_kind(services, "bbs")) == 2
    assert len(of_kind(services, "auctioneer")) == 2
    reps = {name: environment(s) for name, s in of_kind(services, "rep").items()}
    assert len(reps) == 4
    zones = sorted(env["VENDUE_ZONE"] for env in reps.values())
    assert zones == ["z0", "z0", "z1", "z1"]
    assert len({env["VENDUE_CELL_ID"] for env in reps.values()}) == 4
    assert {env.get("VENDUE_EXECUTOR") for env in reps.values()} == {"process"}
    for name, env in reps.items():
        # The auctioneers and the BBS call the rep at its advertised host: its compose service name.
        assert env["VENDUE_ADVERTISE_HOST"] == name


def test_every_service_has_a_healthcheck_and_waits_for_healthy_dependencies(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        test = (service.get("healthcheck") or {}).get("test")
        assert test and test != ["NONE"], f"{name}: no healthcheck"
        if component(service) is not None:
            # The health check reads the port from VENDUE_PORT: give it explicitly.
            assert "VENDUE_PORT" in environment(service), name
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            assert condition == {"condition": "service_healthy"}, f"{name} -> {dependency}"
    for kind in ("bbs", "auctioneer", "rep"):
        for name, service in of_kind(services, kind).items():
            assert "nats" in service["depends_on"], name


def test_a_bbs_is_published_on_the_host(services: dict[str, dict[str, Any]]) -> None:
    published = {}
    for name, service in of_kind(services, "bbs").items():
        for mapping in service.get("ports") or []:
            *host, container = str(mapping).split(":")
            assert int(container) == listen_port(name, service), f"{name}: publishes {container}"
            published[int(host[-1])] = name
    assert 8889 in published  # `vendue push --bbs http://127.0.0.1:8889` from the host


def test_reps_get_time_to_evacuate_before_docker_kills_them(services: dict[str, dict[str, Any]]) -> None:
    for name, service in of_kind(services, "rep").items():
        env = environment(service)
        grace = float(str(service["stop_grace_period"]).removesuffix("s"))
        assert grace > float(env["VENDUE_EVACUATION_TIMEOUT"]) + float(env["VENDUE_STOP_GRACE"]), name


# --- the health check script against /ping answers --------------------------------------------------------


class _Ping(BaseHTTPRequestHandler):
    status = 200
    body = b"{}"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("status", "body", "healthy"),
    [
        (200, {"ok": True}, True),  # auctioneer and rep: ready
        (200, {"ok": True, "ready": True}, True),  # BBS: ready
        (200, {"ok": True, "ready": False}, False),  # BBS: database or NATS not there yet
        (503, {"ok": False, "ready": False}, False),  # auctioneer or rep waiting for NATS or the BBS
    ],
)
def test_the_health_check_follows_ping(
    services: dict[str, dict[str, Any]], status: int, body: dict[str, bool], healthy: bool
) -> None:
    handler = type("Ping", (_Ping,), {"status": status, "body": json.dumps(body).encode()})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        service = services["bbs-1"]
        kind, *argv = service["healthcheck"]["test"]
        assert kind == "CMD" and argv[0] == "python"
        env = {**os.environ, "VENDUE_PORT": str(server.server_address[1])}
        result = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30)
        assert (result.returncode == 0) == healthy, result.stderr
    finally:
        server.shutdown()
        server.server_close()


# --- the nats service's command, run for real -------------------------------------------------------------


async def test_the_nats_command_admits_the_services_credentials_and_no_one_else(
    services: dict[str, dict[str, Any]],
) -> None:
    import nats
    from nats.errors import Error as NatsError

    from common.procutil import free_port
    from common.transport.nats_server import NatsServer

    command = list(services["nats"]["command"])
    assert command[0] == "nats-server"
    # The compose ports become free loopback ports; every other flag is the compose file's own.
    command[command.index("--port") + 1] = "0"
    command[command.index("--http_port") + 1] = str(free_port("127.0.0.1"))

    class ComposeNats(NatsServer):
        def _argv(self, binary: Path) -> list[str]:
            argv = [str(binary), "-a", self.host, *command[1:]]
            argv[argv.index("--port") + 1] = str(self.port)
            return argv

    url = next(url for _, url in urls_of(services["bbs-1"]) if url.startswith("nats://"))
    parts = urlsplit(url)
    with ComposeNats() as server:
        local = parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{server.port}").geturl()
        client = await nats.connect(local, connect_timeout=5, allow_reconnect=False)
        await client.close()
        with pytest.raises((NatsError, OSError)):
            await nats.connect(server.url, connect_timeout=5, allow_reconnect=False, max_reconnect_attempts=0)
