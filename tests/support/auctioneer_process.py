"""`vendue auctioneer` as a real process for a test (auctioneer_process)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from tests.support.polling import eventually

ROOT = Path(__file__).resolve().parents[2]
READY_SECONDS = 60.0  # a cold start imports the engine; the 2-core machine may be busy


@contextlib.asynccontextmanager
async def auctioneer_process(tmp_path: Path, *args: str):
    """Start `vendue auctioneer --port 0 --ready-file F`; yield (url, process); always stop it."""
    ready = tmp_path / "auctioneer.ready"
    log = (tmp_path / "auctioneer.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENDUE_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "from deploy.cli import main; main()",
        "auctioneer", "--port", "0", "--ready-file", str(ready), *args,
        cwd=ROOT, env=env, stdout=log, stderr=log,
    )
    try:
        def log_text() -> str:
            return (tmp_path / "auctioneer.log").read_text(errors="replace")

        await eventually(lambda: ready.exists() or proc.returncode is not None, READY_SECONDS,
                         "the auctioneer's ready file", log_text, interval=0.05)
        assert ready.exists(), f"the auctioneer exited {proc.returncode}; log:\n{log_text()}"
        info = json.loads(ready.read_text())
        assert info["pid"] == proc.pid
        yield info["url"], proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()
