"""docker-compose.yml as the deployment tests read it: its services, their kinds, ports and environment, the
certs service's volumes on the host."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


COMPOSE_FILE = ROOT / "docker-compose.yml"


COMPONENTS = ("bbs", "auctioneer", "rep")


POSTGRES_PORT = 5432


CERTS_SERVICE = "certs"


_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:?-)(?P<default>[^}]*))?\}|\$(?P<bare>\w+)")


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


def run_certs_script(services: dict[str, dict[str, Any]], volumes: Path) -> None:
    certs = services[CERTS_SERVICE]
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "vendue").is_file(), f"no `vendue` script beside {sys.executable}: pip install -e ."
    argv = [on_host(certs, volumes, arg) for arg in [*certs["entrypoint"], *certs["command"]]]
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"the certs script failed:\n{result.stdout}{result.stderr}"


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


def kind_of(name: str, service: dict[str, Any]) -> str:
    return component(service) or name


def listen_port(name: str, service: dict[str, Any]) -> int:
    """The port a service listens on inside the compose network."""
    kind = kind_of(name, service)
    if kind in COMPONENTS:
        return int(
            environment(service).get("VENDUE_PORT") or _settings_class(kind).model_fields["port"].default
        )
    if kind == "nats":  # from its configuration file, which the certs service writes
        return int(nats_listen_address(certs_script())[1])
    if kind == "postgres":
        return int(environment(service).get("PGPORT", POSTGRES_PORT))
    raise AssertionError(f"{name}: unknown kind of service")


def _settings_class(kind: str) -> Any:
    from auctioneer.settings import AuctioneerSettings
    from bbs.settings import BBSSettings
    from rep.settings import RepSettings

    return {"bbs": BBSSettings, "auctioneer": AuctioneerSettings, "rep": RepSettings}[kind]


def certs_script() -> str:
    """The one-shot certs service's shell script (compose's `$$` already read as `$`)."""
    document = interpolate(yaml.safe_load(COMPOSE_FILE.read_text()))
    [script] = document["services"][CERTS_SERVICE]["command"]
    return script


def nats_listen_address(script: str) -> tuple[str, str]:
    """The `--listen HOST:PORT` the certs script gives `vendue certs nats-config`."""
    match = re.search(r"vendue certs nats-config .*--listen (\S+):(\d+)", script)
    assert match, "the certs service must write the NATS configuration with an explicit --listen"
    return match.group(1), match.group(2)


def mounts(service: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Mount target -> (named volume, read-only) for a service's `volumes` (the short syntax)."""
    found = {}
    for entry in service.get("volumes") or []:
        volume, target, *options = str(entry).split(":")
        assert not volume.startswith((".", "/")), f"{entry}: a bind mount, not a named volume"
        found[target] = (volume, "ro" in options)
    return found


def on_host(service: dict[str, Any], volumes: Path, value: str) -> str:
    """`value` with each of the service's mount targets replaced by that volume's directory under `volumes`:
    what the service would find at a path inside its container, found on this machine."""
    targets = mounts(service)
    if not targets:
        return value
    # One pass, longest target first: a path already moved is never matched again.
    pattern = "|".join(re.escape(target) for target in sorted(targets, key=len, reverse=True))
    return re.sub(rf"({pattern})(?![\w.-])", lambda match: str(volumes / targets[match.group(1)][0]), value)


def vendue_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in services.items() if component(s) is not None}
