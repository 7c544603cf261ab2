"""`vendue up --transport nats` as a real subprocess: an embedded nats-server (TLS, a user per certificate)
next to the components (HTTPS, the test acting as the admin through cluster.json's `tls`), shown in
cluster.json, and nothing left running after Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from common.procutil import child_preexec, pid_alive, terminate_then_kill
from common.tls import TLSFiles, client_context
from deploy.cluster import CLUSTER_FILE, ENTRY_POINT, PROJECT_ROOT
from tests.support.polling import expect, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_up_with_nats_starts_an_embedded_server_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "data"
    log = (tmp_path / "up.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENDUE_")}
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    up = subprocess.Popen(
        [*ENTRY_POINT, "up", "--cells", "2", "--transport", "nats", "--data-dir", str(data)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        preexec_fn=child_preexec(),
    )
    try:

        def cluster_info() -> dict:
            assert up.poll() is None, (
                f"vendue up exited {up.returncode}: {(tmp_path / 'up.log').read_text()[-2000:]}"
            )
            info = json.loads((data / CLUSTER_FILE).read_text())
            return expect(len(info.get("reps") or []) >= 2 and info, info)

        info = wait_for(cluster_info, 120.0, "cluster.json with 2 cells", interval=0.2,
                        retry_on=(OSError, ValueError))
        assert info["transport"] == "nats" and info["nats_url"].startswith("tls://127.0.0.1:"), info
        server_log = (data / "logs" / "nats-server.log").read_text()
        assert "Server is ready" in server_log
        admin = client_context(
            TLSFiles(Path(info["tls"]["cert"]), Path(info["tls"]["key"]), Path(info["tls"]["ca"]))
        )
        ping = httpx.get(f"{info['auctioneer_url']}/ping", timeout=5, verify=admin).json()
        assert ping == {"ok": True, "ready": True, "insecure": False}, ping
        stats = httpx.get(f"{info['auctioneer_url']}/v1/stats", timeout=5, verify=admin).json()
        assert stats["transport"] == "nats" and stats["nats"]["connected"], stats
        nats_pid = int(server_log.split("]", 1)[0].lstrip("["))
        assert pid_alive(nats_pid)

        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0, (tmp_path / "up.log").read_text()[-2000:]
        pids = [nats_pid, *(c["pid"] for c in info["components"].values() if c.get("pid"))]
        wait_for(lambda: not any(pid_alive(p) for p in pids), 10.0, "every child gone",
                 lambda: f"alive: {[p for p in pids if pid_alive(p)]}")
    finally:
        if up.poll() is None:
            terminate_then_kill(up, 10)
        log.close()
