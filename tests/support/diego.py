"""Talking to the BBS's Diego API (bbs/diego) in tests: a small protobuf client, and the real `cfdot`.

cfdot (Cloud Foundry's Diego operator CLI, a static binary: shared/tools/README) is found at
`<repository root>/../shared/tools/cfdot`; tests that need it skip, saying why, where it is absent.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from bbs.diego.codec import PROTOBUF
from common.tls import TLSFiles

ROOT = Path(__file__).resolve().parents[2]
CFDOT = ROOT.parent / "shared" / "tools" / "cfdot"
CFDOT_TIMEOUT_S = 30.0


def cfdot_or_skip() -> Path:
    if not (CFDOT.is_file() and os.access(CFDOT, os.X_OK)):
        pytest.skip(f"cfdot is not at {CFDOT} (Cloud Foundry's Diego CLI, a binary kept beside the "
                    "repository in shared/tools): the tests that drive Vendue with it cannot run")
    return CFDOT


def cfdot(url: str, files: TLSFiles, *args: str, check: bool = True,
          timeout: float = CFDOT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Run cfdot against the Diego API at `url` with the client certificate `files`."""
    binary = cfdot_or_skip()
    done = subprocess.run(
        [str(binary), "--bbsURL", url, "--caCertFile", str(files.ca), "--clientCertFile", str(files.cert),
         "--clientKeyFile", str(files.key), "--timeout", str(int(timeout)), *args],
        capture_output=True, text=True, timeout=timeout + 5, stdin=subprocess.DEVNULL)
    if check and done.returncode != 0:
        raise AssertionError(f"cfdot {' '.join(args)}: expected exit 0, saw {done.returncode}: "
                             f"{done.stderr.strip()[-2000:]}")
    return done


def json_lines(text: str) -> list[dict[str, Any]]:
    """cfdot's listings: one JSON object per line."""
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


class DiegoClient:
    """Diego's wire, as Go's BBS client speaks it: POST a protobuf body, a protobuf answer."""

    def __init__(self, url: str, verify: Any) -> None:
        self.http = httpx.Client(base_url=url, verify=verify, timeout=30.0)

    def call(self, path: str, request: Any, response_type: Any) -> Any:
        body = request.SerializeToString() if request is not None else b""
        answer = self.http.post(path, content=body, headers={"Content-Type": PROTOBUF,
                                                             "Accept": PROTOBUF})
        assert answer.status_code == 200, f"{path}: expected 200, saw {answer.status_code}: {answer.text}"
        assert answer.headers["content-type"] == PROTOBUF, answer.headers
        message = response_type()
        message.ParseFromString(answer.content)
        return message

    def close(self) -> None:
        self.http.close()
