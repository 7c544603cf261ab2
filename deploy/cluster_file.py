"""<data-dir>/cluster.json: where the running local cluster is, for the CLI (`vendue apps` and the other
client commands read it; the launcher writes it once every component serves and removes it when it stops).

Light on purpose: every client command imports this module, none of them the launcher (deploy/cluster.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

CLUSTER_FILE = "cluster.json"


def read_cluster_file(data_dir: Path) -> dict[str, Any] | None:
    """The running local cluster in `data_dir` (None if there is none, or its launcher is gone)."""
    from common.procutil import pid_alive  # asyncio and ctypes: not for `--help`

    path = Path(data_dir) / CLUSTER_FILE
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not pid_alive(int(info.get("pid", 0) or 0)):
        return None
    return info


def write_cluster_file(data_dir: Path, info: dict[str, Any]) -> None:
    """Replace cluster.json with `info` at once (a reader never sees half a file)."""
    path = Path(data_dir) / CLUSTER_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info, indent=2) + "\n")
    os.replace(tmp, path)


def forget_cluster_file(data_dir: Path) -> None:
    """Remove cluster.json if this process wrote it (another launcher's stays)."""
    with contextlib.suppress(FileNotFoundError):
        path = Path(data_dir) / CLUSTER_FILE
        info = json.loads(path.read_text())
        if info.get("pid") == os.getpid():
            path.unlink()


def redact_database_url(url: str) -> str:
    """A database URL without its password (for cluster.json and the console)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: show nothing of it
        return "(unparsable)"
