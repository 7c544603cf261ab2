"""Running the `vendue` CLI as its own process against a test cluster, as a user at a terminal would."""

from __future__ import annotations

import os
import sys
from typing import Any

CLUSTER_CREDENTIALS = ("VENDUE_TLS_CERT", "VENDUE_TLS_KEY", "VENDUE_TLS_CA", "VENDUE_TOKEN")


def vendue_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "deploy.cli", *args]


def cli_env(cluster: Any) -> dict[str, str]:
    """The environment of a CLI for `cluster` (an E2ECluster): its BBS and data dir, where the CLI finds the
    admin's credentials as `vendue up` leaves them; none of the test process's own."""
    env = {**os.environ, "VENDUE_BBS_URL": cluster.lc.bbs_url, "VENDUE_DATA_DIR": str(cluster.lc.data_dir),
           "NO_COLOR": "1", "COLUMNS": "200", "TERM": "xterm"}
    for name in CLUSTER_CREDENTIALS:
        env.pop(name, None)
    return env
