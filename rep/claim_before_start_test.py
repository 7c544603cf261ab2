"""An LRP instance's command runs only once the BBS accepted its claim: work for an instance the BBS does
not give this cell (a forged or late auction's) is refused at the claim, and nothing of it ever runs. Real
processes (the process executor, no isolation), a real outbox flusher, a fake BBS answering its batches."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from common.models import DesiredLRP, HealthCheck, InstanceRef, LifecycleResult, ModificationTag
from common.procutil import app_python
from tests.support.polling import eventually

from .cell import CellConfig, RepCell
from .process_executor import ProcessExecutor
from .reports import Reports

NOW = datetime(2024, 1, 1, tzinfo=UTC)
DEADLINE_S = 30.0  # child Pythons start slowly on a busy 2-core machine
BBS_ANSWERS_WITHIN_S = 1.0  # the fake BBS answers once a refused instance left a marker, or after this


def marking(process_guid: str, marker: Path) -> DesiredLRP:
    """An app whose command writes `marker` at once, then stays up."""
    script = f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text('ran'); time.sleep(60)"
    return DesiredLRP(process_guid=process_guid, command=[app_python(), "-c", script], ports=[],
                      health_check=HealthCheck(type="process", timeout_s=DEADLINE_S), created_at=NOW,
                      modification_tag=ModificationTag(epoch="e"))


async def test_a_refused_claim_never_starts_its_process(tmp_path: Path) -> None:
    forged_marker, ours_marker = tmp_path / "forged-ran", tmp_path / "ours-ran"
    batches: list[Reports] = []

    async def bbs(batch: Reports) -> LifecycleResult:
        """Refuses every claim for `forged`, slowly: a start that did not wait for the answer shows."""
        batches.append(batch)
        loop = asyncio.get_running_loop()
        until = loop.time() + BBS_ANSWERS_WITHIN_S
        while not forged_marker.exists() and loop.time() < until:
            await asyncio.sleep(0.02)
        return LifecycleResult(refused=[InstanceRef(process_guid=r.process_guid, index=r.index,
                                                    instance_guid=r.instance_guid)
                                        for r in batch.claimed if r.process_guid == "forged"])

    executor = ProcessExecutor(tmp_path / "executor", "cell-p", stop_grace_s=0.5, process_grace_s=0.3)
    await executor.open()
    config = CellConfig(cell_id="cell-p", zone="z1", rep_url="http://rep", host="127.0.0.1", memory_mb=1024,
                        disk_mb=8192, containers=10, stacks=("cflinuxfs4",))
    cell = RepCell(config, executor, bbs)
    flusher = asyncio.create_task(cell.outbox.run())
    try:
        result = cell.take([(marking("forged", forged_marker), 0), (marking("ours", ours_marker), 0)], [], 1)
        assert result.rejected_lrps == []
        await eventually(ours_marker.exists, DEADLINE_S, "the accepted instance's process",
                         lambda: [i.instance_guid for i in cell.detail().lrps])
        assert await cell.outbox.drain(DEADLINE_S)
        assert [r.process_guid for r in batches[0].claimed] == ["forged", "ours"], "one batch of claims"
        assert not forged_marker.exists(), "the refused instance's command ran"
        assert [i.process_guid for i in cell.detail().lrps] == ["ours"]
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
        executor.kill_all()
        await executor.close()
