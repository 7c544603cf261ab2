"""`vendue bbs` as a real process for a test (BBSProcess: HTTPS with a certificate from a CA in the test's
directory, the tests calling as an admin), and the CA it uses (certificates)."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from common.procutil import child_preexec, free_port, terminate_then_kill, wait_ready_file
from common.tls import CA_CERT, TLSFiles, client_context, init_ca, issue

ROOT = Path(__file__).resolve().parents[2]


def certificates(data_dir: Path) -> Path:
    """The CA in <data_dir>/certs (made once) with a BBS's and an admin's certificate."""
    certs = data_dir / "certs"
    if not (certs / CA_CERT).exists():
        init_ca(certs)
        issue(certs, role="bbs", name="bbs")
        issue(certs, role="admin", name="admin")
    return certs


class BBSProcess:
    """`vendue bbs` serving HTTPS with `bbs.pem` from `certs`, a CA directory that also holds `admin.pem`
    (default: made in <data_dir>/certs). tls=False: no TLS files, plain HTTP on loopback with
    authorization off."""

    def __init__(self, data_dir: Path, tag: str, database_url: str | None = None, *extra_args: str,
                 tls: bool = True, certs: Path | None = None) -> None:
        self.ready = data_dir / f"ready-{tag}.json"
        database = ["--database-url", database_url] if database_url else []
        tls_args: list[str] = []
        self.verify: ssl.SSLContext | bool = True  # the tests' requests: as an admin
        if tls:
            certs = certs or certificates(data_dir)
            served = TLSFiles.in_dir(certs, "bbs")
            tls_args = [
                "--tls-cert",
                str(served.cert),
                "--tls-key",
                str(served.key),
                "--tls-ca",
                str(served.ca),
            ]
            self.verify = client_context(TLSFiles.in_dir(certs, "admin"))
        self.log = open(data_dir / f"bbs-{tag}.log", "wb")  # noqa: SIM115 - closed in stop()
        dead_auctioneer = f"https://127.0.0.1:{free_port()}"  # nothing listens: sends fail, state stays
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deploy.cli",
                "bbs",
                "--port",
                "0",
                "--ready-file",
                str(self.ready),
                "--data-dir",
                str(data_dir),
                "--auctioneer-url",
                dead_auctioneer,
                "--convergence-interval",
                "0.5",
                *database,
                *tls_args,
                *extra_args,
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            preexec_fn=child_preexec(),
            env={**os.environ, "VENDUE_HTTP_TIMEOUT": "1"},
        )
        try:
            ready = wait_ready_file(self.ready, timeout_s=30, proc=self.proc)
            self.url = str(ready["url"])
            self.diego_url = str(ready.get("diego_url") or "")  # with --diego-listen (bbs/diego)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        terminate_then_kill(self.proc, grace_s=10)
        self.log.close()

    def client(self, **options: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, verify=self.verify, **options)

    def async_client(self, **options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, verify=self.verify, **options)
