"""What the checker sees at one moment: the BBS's view (read as the cluster's admin) and, independently of
it, the real processes on every host (each host's network namespace, `ip netns pids`, and each process's
/proc/<pid>/environ, read as root: the rep gives every instance PROCESS_GUID, INSTANCE_INDEX and
INSTANCE_GUID, every task TASK_GUID).

    bbs = BBSReader(cluster.bbs_urls, cluster.verify)
    view = bbs.read()                                    # None when no BBS replica answers
    processes = host_processes(cluster)                  # [RealProcess(host, pid, ...), ...]
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from tests.e2e.conftest import proc_environ

READ_TIMEOUT_S = 2.0  # a stalled replica costs this much before the next one is asked


@dataclass(frozen=True)
class BBSView:
    desired: dict[str, int]  # process_guid -> instances
    actuals: list[dict[str, Any]]
    tasks: dict[str, dict[str, Any]]  # task_guid -> the task
    cells: frozenset[str]  # the cells present
    url: str  # the replica that answered


@dataclass(frozen=True)
class RealProcess:
    host: str
    pid: int
    process_guid: str = ""
    index: int = -1
    instance_guid: str = ""
    task_guid: str = ""
    cell_id: str = ""  # what the rep told it (CELL_ID)

    @property
    def instance(self) -> tuple[str, int] | None:
        return (self.process_guid, self.index) if self.process_guid else None


class Hosts(Protocol):
    hosts: dict[str, Any]

    def host_pids(self, host: str) -> list[int]: ...


class BBSReader:
    """Reads the BBS's state from whichever replica answers, the last one that did first."""

    def __init__(self, urls: list[str], verify: ssl.SSLContext | bool) -> None:
        self.urls = list(urls)
        self.http = httpx.Client(verify=verify, timeout=READ_TIMEOUT_S)

    def close(self) -> None:
        self.http.close()

    def read(self) -> BBSView | None:
        for url in list(self.urls):
            try:
                view = self._read(url)
            except (httpx.HTTPError, OSError, ValueError, KeyError):
                continue
            if url != self.urls[0]:
                self.urls.remove(url)
                self.urls.insert(0, url)
            return view
        return None

    def _read(self, url: str) -> BBSView:
        def items(path: str) -> list[dict[str, Any]]:
            response = self.http.get(f"{url}{path}")
            response.raise_for_status()
            return list(response.json()["items"])

        desired = {d["process_guid"]: int(d["instances"]) for d in items("/v1/desired_lrps")}
        actuals = items("/v1/actual_lrps")
        tasks = {t["task_guid"]: t for t in items("/v1/tasks")}
        cells = frozenset(c["cell_id"] for c in items("/v1/cells"))
        return BBSView(desired, actuals, tasks, cells, url)


def host_processes(cluster: Hosts) -> list[RealProcess]:
    """Every live process on every host that the rep started for an instance or a task."""
    found = []
    for host in cluster.hosts:
        for pid in cluster.host_pids(host):
            env = proc_environ(pid)
            if "PROCESS_GUID" in env and "INSTANCE_INDEX" in env:
                found.append(RealProcess(host, pid, env["PROCESS_GUID"], int(env["INSTANCE_INDEX"]),
                                         env.get("INSTANCE_GUID", ""), cell_id=env.get("CELL_ID", "")))
            elif "TASK_GUID" in env:
                found.append(
                    RealProcess(host, pid, task_guid=env["TASK_GUID"], cell_id=env.get("CELL_ID", ""))
                )
    return found
