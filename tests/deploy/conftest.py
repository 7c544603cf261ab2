"""The deployment tests' fixtures: docker-compose.yml's services, and the volumes its certs service fills (its
script run once per module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.compose import (
    CERTS_SERVICE,
    COMPOSE_FILE,
    interpolate,
    mounts,
    run_certs_script,
)


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    document = interpolate(yaml.safe_load(COMPOSE_FILE.read_text()))
    return document["services"]


@pytest.fixture(scope="module")
def volumes(services: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every named volume the certs service fills, as a directory, after running its script (the
    service's own entrypoint and command, its mount targets moved to those directories)."""
    root = tmp_path_factory.mktemp("volumes")
    for volume, _ in mounts(services[CERTS_SERVICE]).values():
        (root / volume).mkdir()
    run_certs_script(services, root)
    return root
