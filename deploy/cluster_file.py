"""<data-dir>/cluster.json: where the running local cluster is, for the CLI (`vendue apps` and the other
client commands read it; the launcher writes it once every component serves and removes it when it stops).

Light on purpose: every client command imports this module, none of them the launcher (deploy/cluster.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from .cluster import LocalCluster

CLUSTER_FILE = "cluster.json"
# The launcher's own files (logs, cluster.json) are for its user alone, as the data dirs are: logs carry
# what apps and components print, cluster.json every pid and URL. Apps may run as other users.
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`path` made (with its parents) or kept, 0700 either way."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    path.chmod(PRIVATE_DIR_MODE)  # also when it was there already, or the umask narrowed the mkdir
    return path


def open_private(path: Path, append: bool = True) -> BinaryIO:
    """`path` opened for writing (appending, or from empty), 0600 whether new or there already."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
        return os.fdopen(fd, "ab" if append else "wb")
    except BaseException:
        os.close(fd)
        raise


def private_log(path: Path) -> Path:
    """A log another program opens for appending, made 0600 (and its directory 0700) beforehand."""
    private_dir(path.parent)
    open_private(path).close()
    return path


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
    with open_private(tmp, append=False) as out:
        out.write((json.dumps(info, indent=2) + "\n").encode())
    os.replace(tmp, path)


def forget_cluster_file(data_dir: Path) -> None:
    """Remove cluster.json if this process wrote it (another launcher's stays)."""
    with contextlib.suppress(FileNotFoundError):
        path = Path(data_dir) / CLUSTER_FILE
        info = json.loads(path.read_text())
        if info.get("pid") == os.getpid():
            path.unlink()


def cluster_info(cluster: LocalCluster) -> dict[str, Any]:
    """What cluster.json says of a started cluster: where each component is, its pid and log, how to talk
    to it (the admin's TLS files), and no secret (the NATS and database URLs without their passwords)."""
    from common.transport.nats_connection import redact  # nats: the launcher's, not the client commands'

    files = cluster.client_tls()
    postgres = cluster.postgres
    return {
        "bbs_url": cluster.bbs_url,
        "bbs_urls": cluster.bbs_urls,
        "auctioneer_url": cluster.auctioneer_url,
        "diego_url": cluster.diego_url,  # Diego's BBS API (bbs/diego), for cfdot and Cloud Foundry
        "reps": {
            cell_id: {"zone": r.zone, "url": r.url, "pid": r.proc.pid, "process": r.component}
            for cell_id, r in cluster.reps.items()
        },
        "components": {
            name: {"url": url, "pid": pid, "log": str(cluster.logs_dir / f"{name}.log")}
            for name, url, pid in cluster.component_processes()
        },
        "pid": os.getpid(),
        "data_dir": str(cluster.data_dir),
        "transport": cluster.transport,
        "ha": cluster.ha,
        **({"tls": {"ca": str(files.ca), "cert": str(files.cert), "key": str(files.key)}}
           if files is not None else {"insecure": True}),
        **({"nats_url": redact(cluster.nats_url)} if cluster.transport == "nats" else {}),
        **({"database_url": redact_database_url(cluster.database_url)} if cluster.database_url else {}),
        **({"postgres": {"pid": postgres.server.proc.pid if postgres.server.proc else None,
                         "log": str(postgres.server.log_file)}} if postgres is not None else {}),
    }


def redact_database_url(url: str) -> str:
    """A database URL without its password (for cluster.json and the console)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: show nothing of it
        return "(unparsable)"
