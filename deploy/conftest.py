"""`bbs`: a real `vendue bbs` process for a test module's CLI tests (client_cmd_test.py, tokens_cmd_test.py).

It serves HTTPS with a certificate from a CA of the module's and has no auctioneer and no reps (nothing gets
placed); `bbs.vendue(...)` runs a CLI command against it as its admin.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from common.procutil import child_preexec, free_port, terminate_then_kill, wait_ready_file
from common.tls import TLSFiles, client_context, init_ca, issue

from .cli import _register, app
from .cluster import ENTRY_POINT, PROJECT_ROOT


@dataclass
class ServedBBS:
    url: str
    pki: Path  # the CA, and the certificates of "bbs", "admin" and "viewer" (a reader)
    http: httpx.Client  # the tests' own requests, as the admin

    def tls_env(self, name: str = "admin") -> dict[str, str | None]:
        files = TLSFiles.in_dir(self.pki, name)
        return {
            "VENDUE_TLS_CERT": str(files.cert),
            "VENDUE_TLS_KEY": str(files.key),
            "VENDUE_TLS_CA": str(files.ca),
        }

    def vendue(self, *args: str, url: str | None = None, env: dict[str, str | None] | None = None) -> Result:
        """`vendue ARGS` as the admin (VENDUE_TLS_*; `env` overrides: None unsets) against `url` (default
        this BBS's). Through the environment: a trailing `--bbs URL` would land in the COMMAND after `--`."""
        return CliRunner().invoke(
            app,
            list(args),
            env={"VENDUE_BBS_URL": url or self.url, "VENDUE_TOKEN": None, **self.tls_env(), **(env or {})},
        )


@pytest.fixture(scope="module")
def bbs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedBBS]:
    _register()  # every command, on the app the tests invoke
    pki = tmp_path_factory.mktemp("certs")
    init_ca(pki)
    for role, name in (("bbs", "bbs"), ("admin", "admin"), ("reader", "viewer")):
        issue(pki, role=role, name=name)
    data_dir = tmp_path_factory.mktemp("bbs")
    ready = data_dir / "bbs.ready"
    nobody = f"https://127.0.0.1:{free_port()}"  # no auctioneer: start requests fail, LRPs stay UNCLAIMED
    files = TLSFiles.in_dir(pki, "bbs")
    with open(data_dir / "bbs.log", "wb") as log:
        proc = subprocess.Popen(
            [*ENTRY_POINT, "bbs", "--port", "0", "--ready-file", str(ready), "--data-dir", str(data_dir),
             "--auctioneer-url", nobody, "--tls-cert", str(files.cert), "--tls-key", str(files.key),
             "--tls-ca", str(files.ca)],
            stdout=log, stderr=subprocess.STDOUT, cwd=PROJECT_ROOT, preexec_fn=child_preexec(),
        )
    try:
        try:
            url = str(wait_ready_file(ready, timeout_s=60.0, proc=proc)["url"])
        except (RuntimeError, TimeoutError) as exc:
            pytest.fail(f"the BBS did not start: {exc}\n{(data_dir / 'bbs.log').read_text()[-3000:]}")
        with httpx.Client(
            base_url=url, verify=client_context(TLSFiles.in_dir(pki, "admin")), timeout=10.0
        ) as http:
            yield ServedBBS(url, pki, http)
    finally:
        terminate_then_kill(proc, grace_s=10.0)
