"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

What `docker compose up` would find out the slow way is found here: the one-shot certs service's own
script, run with its volumes in a temporary directory, makes what every Vendue service needs: each
service's `--check-config` passes with that service's environment and its own volume; each serves HTTPS
with a certificate of its role that names the host the others dial, none is `--insecure`, and none can
read another's key or the CA's. Every URL names a service that exists, of the right kind, on the port it
listens on, over https or tls; database credentials agree with the postgres service; the topology is two
BBS, two auctioneers and four reps in two zones; every service has a health check (the Vendue one asks
/readyz over HTTPS, trusting the CA) and waits for its dependencies; the nats service's command, run by
the local nats-server binary on the configuration the certs service wrote, admits every service's
certificate and no one without one.

Compose's `${VAR:-default}` interpolation is applied with every variable unset (as on a machine with
no .env file), so the defaults themselves must agree.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
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

from tests.support.compose import (
    CERTS_SERVICE,
    COMPOSE_FILE,
    ROOT,
    certs_script,
    component,
    environment,
    kind_of,
    listen_port,
    mounts,
    on_host,
    run_certs_script,
    vendue_services,
)

DOCKERFILE = ROOT / "Dockerfile"
# Which kind of service each URL setting must point at.
URL_TARGETS = {
    "VENDUE_BBS_URL": "bbs",
    "VENDUE_AUCTIONEER_URL": "auctioneer",
    "VENDUE_ADVERTISE_URL": "auctioneer",
    "VENDUE_NATS_URL": "nats",
    "VENDUE_DATABASE_URL": "postgres",
}
# Between Vendue's own services only these: HTTPS, and NATS over TLS (PostgreSQL is the database's own).
SECURE_SCHEMES = {
    "VENDUE_BBS_URL": "https",
    "VENDUE_AUCTIONEER_URL": "https",
    "VENDUE_ADVERTISE_URL": "https",
    "VENDUE_NATS_URL": "tls",
}
DEFAULT_PORTS = {
    "http": 80,
    "https": 443,
    "nats": 4222,
    "tls": 4222,
    "postgresql": 5432,
    "postgresql+asyncpg": 5432,
}
TLS_SETTINGS = ("VENDUE_TLS_CERT", "VENDUE_TLS_KEY", "VENDUE_TLS_CA")
# The first nats-server release that takes a TLS-first handshake (`tls { handshake_first: auto }`).
NATS_TLS_FIRST = (2, 10, 4)


# --- loading ---------------------------------------------------------------------------------------


def of_kind(services: dict[str, dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if kind_of(name, s) == kind}


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
    for needed in ["pyproject.toml", "constraints.txt", pyproject["project"]["readme"], *packages]:
        assert not any(fnmatch(needed, pattern) for pattern in patterns), f".dockerignore drops {needed}"


def test_the_image_installs_every_dependency_at_a_pinned_version_and_no_extra() -> None:
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    installs = [line for line in lines if line.startswith("RUN pip install")]
    constrained = "--constraint /tmp/vendue-src/constraints.txt /tmp/vendue-src "
    assert installs and all(constrained in line for line in installs)
    pinned = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not pinned with =="
            pinned[canonicalize_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    dependencies = [Requirement(r) for r in project["dependencies"]]
    unpinned = [str(r) for r in dependencies
                if (r.marker is None or r.marker.evaluate()) and canonicalize_name(r.name) not in pinned]
    assert unpinned == [], f"not in constraints.txt (regenerate it: its header says how): {unpinned}"
    assert "plotly" not in pinned, "the image is the base install: plotly comes with the report extra"


def test_dockerignore_keeps_certificates_and_keys_out_of_the_image() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    # The operator copies the admin key next to the compose file; `COPY .` would keep it in a layer.
    assert "**/*.pem" in patterns


# --- every Vendue service ----------------------------------------------------------------------------


@pytest.mark.slow  # the certs script's dozen `vendue certs` runs, then eight interpreter start-ups
def test_every_vendue_service_passes_its_components_check_config(
    services: dict[str, dict[str, Any]], volumes: Path
) -> None:
    vendue = vendue_services(services)
    assert vendue
    host_env = {key: value for key, value in os.environ.items() if not key.startswith("VENDUE_")}
    # Started together and then awaited: eight interpreter start-ups share the wait.
    running = {}
    for name, service in vendue.items():
        env = {**host_env, **image_environment(), **environment(service)}
        env = {key: on_host(service, volumes, value) for key, value in env.items()}
        argv = [sys.executable, "-m", "deploy.cli", *service["command"], "--check-config"]
        running[name] = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    for name, process in running.items():
        output, _ = process.communicate(timeout=120)
        assert (process.returncode, output.strip()) == (0, "config ok"), f"{name}: {output}"


@pytest.mark.slow  # the certs script
def test_every_vendue_service_serves_tls_with_its_own_certificate_and_none_is_insecure(
    services: dict[str, dict[str, Any]], volumes: Path
) -> None:
    from common.tls import TLSFiles

    vendue = vendue_services(services)
    readers: dict[str, list[str]] = {}  # volume -> the Vendue services that mount it
    for name, service in vendue.items():
        for volume, _ in mounts(service).values():
            readers.setdefault(volume, []).append(name)
    for name, service in vendue.items():
        env = {**image_environment(), **environment(service)}
        assert "--insecure" not in service["command"], name
        assert env.get("VENDUE_INSECURE", "").lower() in ("", "0", "false", "no"), name
        assert all(env.get(setting) for setting in TLS_SETTINGS), f"{name}: needs {TLS_SETTINGS}"
        [(target, (volume, read_only))] = [
            (target, how)
            for target, how in mounts(service).items()
            if env["VENDUE_TLS_KEY"].startswith(target + "/")
        ]
        # Its key in a volume of its own, read-only: no other service, nor an app a rep runs, reads it.
        assert read_only and readers[volume] == [name], (
            f"{name}: {volume} at {target}, mounted by {readers[volume]}"
        )
        assert not list((volumes / volume).glob("ca-key*")), f"{name}: the CA's key is in {volume}"
        made_by_certs = {v for v, _ in mounts(services[CERTS_SERVICE]).values()}
        others = {v for v, _ in mounts(service).values()} & made_by_certs - {volume}
        assert not others, f"{name} also mounts {sorted(others)}: keys that are not its own"
        files = TLSFiles(*(Path(on_host(service, volumes, env[setting])) for setting in TLS_SETTINGS))
        assert stat.S_IMODE(files.key.stat().st_mode) == 0o600, f"{name}: {files.key}"
        identity = files.identity()
        assert identity is not None and identity.role == component(service), f"{name}: {identity}"
        # The others dial it by its service name (a rep: its advertise host) and check that name.
        dialled = [name, env.get("VENDUE_ADVERTISE_HOST", name)]
        assert set(dialled) <= dns_names(files.cert), f"{name}: {sorted(dns_names(files.cert))}"
        if identity.role == "rep":
            assert identity.speaks_for(env["VENDUE_CELL_ID"]), f"{name}: {identity}"
        for setting, url in urls_of(service):
            if setting in SECURE_SCHEMES:
                assert urlsplit(url).scheme == SECURE_SCHEMES[setting], f"{name}: {setting}={url}"


@pytest.mark.slow  # the certs script
def test_the_operator_gets_an_admin_certificate_and_not_the_cas_key(
    services: dict[str, dict[str, Any]], volumes: Path
) -> None:
    from common.tls import TLSFiles

    script = certs_script()
    match = re.search(r"docker compose cp certs:(\S+) ", script)  # what the README tells the operator
    assert match, "the certs script should say where the operator's certificate is"
    copied = Path(on_host(services[CERTS_SERVICE], volumes, match.group(1)))
    assert sorted(path.name for path in copied.iterdir()) == ["admin-key.pem", "admin.pem", "ca.pem"]
    files = TLSFiles.in_dir(copied, "admin")
    assert files.identity() is not None and files.identity().role == "admin"  # type: ignore[union-attr]
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert f"docker compose cp certs:{match.group(1)} " in (ROOT / "README.md").read_text()


@pytest.mark.slow  # the certs script, twice
def test_the_certs_script_runs_again_on_every_up_and_keeps_what_it_made(
    services: dict[str, dict[str, Any]], volumes: Path
) -> None:
    def contents() -> dict[str, bytes]:
        return {
            str(path.relative_to(volumes)): path.read_bytes() for path in volumes.rglob("*") if path.is_file()
        }

    before = contents()
    run_certs_script(services, volumes)
    assert contents() == before  # the same CA and keys: running services and the operator's copy stay valid


def dns_names(cert: Path) -> set[str]:
    from cryptography import x509

    names = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value
    return set(names.get_values_for_type(x509.DNSName))


def test_every_vendue_service_uses_the_one_image(services: dict[str, dict[str, Any]]) -> None:
    vendue = [*vendue_services(services).values(), services[CERTS_SERVICE]]  # the certs service runs it too
    assert {(s["image"], s["build"]) for s in vendue} == {(vendue[0]["image"], ".")}


def test_every_url_names_a_service_of_the_right_kind_on_its_port(services: dict[str, dict[str, Any]]) -> None:
    for name, service in services.items():
        for setting, url in urls_of(service):
            parts = urlsplit(url)
            target = parts.hostname
            assert target in services, f"{name}: {setting} names {target!r}, not a service"
            assert kind_of(target, services[target]) == URL_TARGETS[setting], f"{name}: {setting} -> {target}"
            if setting == "VENDUE_ADVERTISE_URL":  # where the others reach this very service
                assert target == name, f"{name}: {setting} names {target}"
            port = parts.port or DEFAULT_PORTS[parts.scheme]
            assert port == listen_port(target, services[target]), f"{name}: {setting} port {port}"
    needed = {
        "bbs": {"VENDUE_NATS_URL", "VENDUE_DATABASE_URL", "VENDUE_AUCTIONEER_URL"},
        "auctioneer": {"VENDUE_NATS_URL", "VENDUE_BBS_URL", "VENDUE_ADVERTISE_URL"},
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
            listed = {
                urlsplit(url).hostname for setting, url in urls_of(service) if setting == "VENDUE_BBS_URL"
            }
            assert listed == bbs_replicas, f"{name} lists {sorted(listed)}: losing a BBS must not cut it off"


def test_nats_urls_carry_no_credentials_each_component_is_its_certificate(
    services: dict[str, dict[str, Any]],
) -> None:
    nats_urls = [
        (name, url)
        for name, s in services.items()
        for setting, url in urls_of(s)
        if setting == "VENDUE_NATS_URL"
    ]
    assert len(nats_urls) == len(vendue_services(services))  # every component
    for name, url in nats_urls:
        parts = urlsplit(url)
        assert (parts.username, parts.password) == (None, None), f"{name}: NATS users are certificates"
        assert "VENDUE_NATS_TOKEN" not in environment(services[name]), name
    assert "--user" not in services["nats"]["command"] and "--auth" not in services["nats"]["command"]


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
    certs = services[CERTS_SERVICE]
    # The one-shot: runs to completion once per `up`, never restarted; the others wait for it to succeed.
    assert str(certs.get("restart", "no")) == "no" and "healthcheck" not in certs
    for name, service in services.items():
        if name == CERTS_SERVICE:
            continue
        test = (service.get("healthcheck") or {}).get("test")
        assert test and test != ["NONE"], f"{name}: no healthcheck"
        if component(service) is not None:
            # The health check reads the port from VENDUE_PORT: give it explicitly.
            assert "VENDUE_PORT" in environment(service), name
        for dependency, condition in (service.get("depends_on") or {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            wanted = "service_completed_successfully" if dependency == CERTS_SERVICE else "service_healthy"
            assert condition == {"condition": wanted}, f"{name} -> {dependency}"
    for kind in ("bbs", "auctioneer", "rep", "nats"):
        for name, service in of_kind(services, kind).items():
            assert CERTS_SERVICE in service["depends_on"], name
            if kind != "nats":
                assert "nats" in service["depends_on"], name


def test_a_bbs_is_published_on_the_host(services: dict[str, dict[str, Any]]) -> None:
    published = {}
    for name, service in of_kind(services, "bbs").items():
        for mapping in service.get("ports") or []:
            *host, container = str(mapping).split(":")
            assert int(container) == listen_port(name, service), f"{name}: publishes {container}"
            published[int(host[-1])] = name
    assert 8889 in published  # `vendue push --bbs http://127.0.0.1:8889` from the host


def test_every_vendue_service_runs_under_an_init_that_reaps_orphans(
    services: dict[str, dict[str, Any]],
) -> None:
    # A rep as PID 1 would leave its apps' orphaned children as zombies: Docker's init reaps them.
    for name, service in [*vendue_services(services).items(), (CERTS_SERVICE, services[CERTS_SERVICE])]:
        assert service.get("init") is True, f"{name}: no init"


def test_every_published_host_port_is_a_variable_with_its_default() -> None:
    import yaml

    raw = yaml.safe_load(COMPOSE_FILE.read_text())["services"]  # before interpolation
    defaults = {}
    for name, service in raw.items():
        for mapping in service.get("ports") or []:
            # On the host's loopback only, at a port the operator can move: 127.0.0.1:${VAR:-default}:port
            match = re.fullmatch(r"127\.0\.0\.1:\$\{(VENDUE_\w+_PORT):-(\d+)\}:\d+", str(mapping))
            assert match, f"{name}: publishes {mapping!r}, not 127.0.0.1:${{VENDUE_..._PORT:-default}}:port"
            defaults[match.group(1)] = int(match.group(2))
    assert defaults == {"VENDUE_BBS_PORT": 8889, "VENDUE_BBS2_PORT": 8899, "VENDUE_PROMETHEUS_PORT": 9090}
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    assert all(variable in deployment for variable in defaults), "docs/deployment.md names each variable"


def test_reps_get_time_to_evacuate_before_docker_kills_them(services: dict[str, dict[str, Any]]) -> None:
    for name, service in of_kind(services, "rep").items():
        env = environment(service)
        grace = float(str(service["stop_grace_period"]).removesuffix("s"))
        assert grace > float(env["VENDUE_EVACUATION_TIMEOUT"]) + float(env["VENDUE_STOP_GRACE"]), name


# --- the health check script against /readyz answers ------------------------------------------------------


class _Readyz(BaseHTTPRequestHandler):
    status = 200
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.asked.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"ready": self.status == 200}).encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def health_pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA with a BBS's certificate, and another CA with one (a server the check must not trust)."""
    from common.tls import init_ca, issue

    root = tmp_path_factory.mktemp("health-pki")
    for ca in ("cluster", "other"):
        init_ca(root / ca)
        issue(root / ca, role="bbs", name="bbs-1")
    return root


@pytest.mark.parametrize(
    ("status", "signed_by", "healthy"),
    [
        (200, "cluster", True),  # ready
        (503, "cluster", False),  # the database, NATS or the BBS not there yet
        (200, "other", False),  # whoever answers must hold a certificate of the cluster CA
    ],
)
def test_the_health_check_follows_readyz_over_https(
    services: dict[str, dict[str, Any]], health_pki: Path, status: int, signed_by: str, healthy: bool
) -> None:
    from common.tls import TLSFiles, server_context

    handler = type("Readyz", (_Readyz,), {"status": status, "asked": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    # The components' own server context: it asks for a client certificate, and the check has none.
    context = server_context(TLSFiles.in_dir(health_pki / signed_by, "bbs-1"))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        service = services["bbs-1"]
        kind, *argv = service["healthcheck"]["test"]
        assert kind == "CMD" and argv[0] == "python"
        env = {**os.environ, "VENDUE_PORT": str(server.server_address[1]),
               "VENDUE_TLS_CA": str(health_pki / "cluster" / "ca.pem")}
        result = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, timeout=30)
        assert (result.returncode == 0) == healthy, result.stderr
        assert handler.asked == (["/readyz"] if signed_by == "cluster" else [])
    finally:
        server.shutdown()
        server.server_close()


# --- the nats service's command on the certs service's configuration, run for real ------------------------


def test_the_nats_image_takes_tls_first_handshakes(services: dict[str, dict[str, Any]]) -> None:
    image = services["nats"]["image"]
    match = re.fullmatch(r"nats:(\d+)\.(\d+)\.(\d+)-alpine", image)
    assert match, f"{image}: pin a release (nats:X.Y.Z-alpine), {'.'.join(map(str, NATS_TLS_FIRST))} or later"
    assert tuple(int(part) for part in match.groups()) >= NATS_TLS_FIRST, image


@pytest.mark.slow  # the certs script
async def test_the_nats_configuration_admits_every_services_certificate_and_no_one_else(
    services: dict[str, dict[str, Any]], volumes: Path
) -> None:
    import nats

    from common.procutil import free_port
    from common.tls import TLSFiles, client_context
    from common.transport.nats_server import NatsServer

    nats_service = services["nats"]
    command = [on_host(nats_service, volumes, arg) for arg in nats_service["command"]]
    assert command[0] == "nats-server"
    assert all(read_only for _, read_only in mounts(nats_service).values())
    # The compose ports become free loopback ports (flags win over the file); all else is the file's own.
    command[command.index("--http_port") + 1] = str(free_port("127.0.0.1"))

    class ComposeNats(NatsServer):
        def _argv(self, binary: Path) -> list[str]:
            return [str(binary), *command[1:], "--addr", self.host, "--port", str(self.port)]

    with ComposeNats() as server:
        for name, service in vendue_services(services).items():
            env = environment(service)
            files = TLSFiles(*(Path(on_host(service, volumes, env[setting])) for setting in TLS_SETTINGS))
            dialled = urlsplit(env["VENDUE_NATS_URL"]).hostname  # the server's certificate must name it
            client = await nats.connect(
                f"tls://{server.host}:{server.port}",
                tls=client_context(files),
                tls_hostname=dialled,
                tls_handshake_first=True,
                connect_timeout=5,
                allow_reconnect=False,
            )
            try:
                assert client.is_connected, name
            finally:
                await client.close()
        some_ca = Path(on_host(services["bbs-1"], volumes, environment(services["bbs-1"])["VENDUE_TLS_CA"]))
        with pytest.raises(OSError, match="CERTIFICATE_REQUIRED"):  # trusts the server, presents nothing
            await nats.connect(
                f"tls://{server.host}:{server.port}",
                tls=client_context(ca=some_ca),
                tls_hostname="nats",
                tls_handshake_first=True,
                connect_timeout=5,
                allow_reconnect=False,
                max_reconnect_attempts=0,
            )
