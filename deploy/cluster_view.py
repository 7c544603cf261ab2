"""How `vendue up` and `vendue demo` show a running local cluster on the console."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from common.tls import INSECURE_WARNING
from common.transport.nats_connection import redact

from .cluster import LocalCluster
from .cluster_file import redact_database_url


def cluster_table(cluster: LocalCluster) -> Table:
    """Where every component is: zone, URL, pid (logs: <data-dir>/logs/<component>.log)."""
    table = Table(
        title=f"local cluster in {cluster.data_dir}", caption=f"logs: {cluster.logs_dir}/<component>.log"
    )
    for column in ("COMPONENT", "ZONE", "URL", "PID"):
        table.add_column(column, no_wrap=True)
    pids = cluster.pids()
    if cluster.transport == "nats":
        nats = cluster.nats_server
        pid = str(nats.proc.pid) if nats is not None and nats.proc is not None else "external"
        table.add_row("nats-server", "", redact(cluster.nats_url), pid)
    if cluster.postgres is not None:
        postgres = cluster.postgres.server
        table.add_row("postgres", "", redact_database_url(cluster.postgres.url),
                      str(postgres.proc.pid) if postgres.proc is not None else "-")
    for name, url in sorted(
        cluster.control_plane().items(), key=lambda item: (item[0].startswith("auc"), item[0])
    ):
        table.add_row(name, "", url, str(pids.get(name, "-")))
    for cell_id, rep in cluster.reps.items():
        table.add_row(f"rep {cell_id}", rep.zone, rep.url, str(rep.proc.pid))
    return table



def warn_insecure(out: Console) -> None:
    """The one warning line of an insecure cluster."""
    out.print(f"[red bold]warning:[/] {INSECURE_WARNING}", highlight=False, soft_wrap=True)
