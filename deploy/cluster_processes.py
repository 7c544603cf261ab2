"""The local cluster's processes: each component is `python -m deploy.cli <component> --port P --ready-file F`
(so it works without `vendue` on PATH), in its own session, with PR_SET_PDEATHSIG=SIGKILL; its log goes to
<data-dir>/logs/<name>.log. Starting one, waiting until it serves, and stopping a group of them.

Where a process starts is the launcher's to say (`on_host`: here, or inside a host's network namespace in
tests/cluster/multihost.py), so spawning takes it as a function.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import httpx

from common.procutil import child_preexec, terminate_then_kill, wait_ready_file

from .cluster_file import open_private, private_dir
from .cluster_topology import ClusterError, Component

# How long a stop waits after SIGTERM before SIGKILL; a rep gets its own --stop-grace besides (`stop_grace`).
STOP_GRACE_S = 10.0
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Every component is this interpreter running the CLI module: no need for `vendue` on PATH.
ENTRY_POINT = (sys.executable, "-m", "deploy.cli")
# The children's security comes from the flags the launcher passes, never from the environment it runs in
# (a VENDUE_INSECURE=1 there must not turn TLS off behind the launcher's back).
SECURITY_ENV = ("VENDUE_TLS_CERT", "VENDUE_TLS_KEY", "VENDUE_TLS_CA", "VENDUE_INSECURE",
                "VENDUE_ENCRYPTION_KEYS", "VENDUE_ENCRYPTION_KEYS_FILE")
DATABASE_ENV = "VENDUE_DATABASE_URL"  # the BBS's database, password included: for the BBS replicas only
T = TypeVar("T")


def wait_until(condition: Callable[[], Any], timeout: float, expected: str,
               seen: Callable[[], str], interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise ClusterError(f"expected {expected} within {timeout:g}s; saw {seen()}")
        time.sleep(interval)


def child_env(extra: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """A component's environment: the launcher's and `extra`, without any security or database setting of
    the launcher's own, with `secrets` (never on a command line: `ps` shows those), and the project
    importable by name (from a source checkout too)."""
    env = {**os.environ, **extra, "PYTHONUNBUFFERED": "1"}
    for name in (*SECURITY_ENV, DATABASE_ENV):
        env.pop(name, None)
    env.update(secrets)
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(PROJECT_ROOT) + (os.pathsep + path if path else "")
    return env


def spawn(component: Component, args: Sequence[str], log_path: Path, env: Mapping[str, str], cwd: Path,
          on_host: Callable[[str, Callable[[], subprocess.Popen[bytes]]], subprocess.Popen[bytes]]) -> None:
    """Start `component` as `python -m deploy.cli ARGS`, its output appended to `log_path`."""
    argv = [*ENTRY_POINT, *args]
    private_dir(log_path.parent)
    with open_private(log_path) as log:
        log.write(f"--- launcher: starting {' '.join(args)}\n".encode())
        log.flush()
        component.proc = on_host(component.name, lambda: subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=dict(env),
            cwd=cwd, start_new_session=True, preexec_fn=child_preexec(die_with_parent=True),
        ))
    component.url = ""


def log_tail(log_path: Path, lines: int = 15) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def await_serving(component: Component, ready_path: Path, log_path: Path, verify: ssl.SSLContext | bool,
                  timeout: float) -> None:
    """Wait for the component's ready file, record its URL (and the port it bound), then wait until it
    answers /ping."""
    assert component.proc is not None
    try:
        info = wait_ready_file(ready_path, timeout_s=max(timeout, 0.1), proc=component.proc)
    except (RuntimeError, TimeoutError) as exc:
        raise ClusterError(f"{component.name} did not start: {exc}\n"
                           f"--- {log_path} (tail) ---\n{log_tail(log_path)}") from None
    component.url = str(info["url"]).rstrip("/")
    if component.port == 0:
        component.port = int(component.url.rsplit(":", 1)[1].split("/", 1)[0])

    def pings() -> bool:
        try:
            return httpx.get(f"{component.url}/ping", timeout=2.0, verify=verify).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(pings, max(timeout, 1.0), f"{component.name} to answer {component.url}/ping",
               lambda: "no 200 answer")


def await_cells_present(bbs_url: Callable[[], str], reps: Sequence[Component], verify: ssl.SSLContext | bool,
                        timeout: float) -> dict[str, str]:
    """Wait until the BBS lists every cell these processes host; return each cell's rep URL."""
    expected = {cell_id for rep in reps for cell_id, _ in rep.cells}
    seen: dict[str, str] = {}

    def present() -> bool:
        try:
            response = httpx.get(f"{bbs_url()}/v1/cells", timeout=2.0, verify=verify)
            items = response.json()["items"] if response.status_code == 200 else []
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        seen.clear()
        seen.update({item["cell_id"]: item["rep_url"] for item in items})
        return all(cell_id in seen for cell_id in expected)

    def missing() -> str:
        absent = sorted(expected - set(seen))
        return f"cells {sorted(seen)} present, missing {absent}"

    wait_until(present, max(timeout, 1.0), f"cells {sorted(expected)} present in the BBS", missing)
    return {cell_id: seen[cell_id].rstrip("/") for cell_id in expected}


def stop_signal(component: Component) -> int:
    """SIGINT for a rep (stop its containers, report them, exit) rather than SIGTERM (evacuate)."""
    return signal.SIGINT if component.cells else signal.SIGTERM


def stop_grace(component: Component) -> float:
    """How long a component may take to stop: STOP_GRACE_S, and a rep its instances' --stop-grace besides.
    An instance that ignores SIGTERM (a container's pid 1 that installs no handler, like most) holds its
    rep that long; killed then, the rep would leave its containers, mounts and bridge to the sweep."""
    if not component.cells:
        return STOP_GRACE_S
    from rep.settings import RepSettings

    given = [i for i, arg in enumerate(component.args[:-1]) if arg == "--stop-grace"]
    grace = component.args[given[-1] + 1] if given else RepSettings.model_fields["stop_grace"].default
    return STOP_GRACE_S + float(grace)


def stop_all(components: Sequence[Component]) -> None:
    """Signal every running one, give each its `stop_grace` (all at once), then SIGKILL each one's whole
    session."""
    for component in components:
        if component.running:
            assert component.proc is not None
            with contextlib.suppress(ProcessLookupError):
                component.proc.send_signal(stop_signal(component))
    signalled = time.monotonic()
    for component in components:
        if component.proc is None:
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            component.proc.wait(timeout=max(0.0, signalled + stop_grace(component) - time.monotonic()))
        # SIGKILL only if still needed; group=True also takes whatever is left in its session.
        terminate_then_kill(component.proc, grace_s=0.0, group=True)
