"""The chaos campaign in CI: two minutes of faults with a fixed seed on transport http (campaign.py). It
fails on any finding: a write the BBS acknowledged and lost, a task run or COMPLETED twice, a duplicate
or a process not desired past the repair deadline, the cluster not repaired at the end, a process left
after the teardown. Needs root and `ip` (skipped otherwise, saying why)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.multihost import unavailable_reason

from .campaign import Settings, run_campaign

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

SEED = 15


def test_two_minutes_of_faults_lose_no_acknowledged_write_and_run_nothing_twice(tmp_path: Path) -> None:
    if (reason := unavailable_reason()) is not None:
        pytest.skip(reason)
    report = run_campaign(Settings(minutes=2, seed=SEED, transport="http"), progress=print,
                          keep_logs=tmp_path / "logs")
    print(json.dumps(report, indent=2))  # captured: pytest shows it when the test fails
    assert report["faults"]["injected"] >= 5, f"expected many faults in two minutes, saw {report['faults']}"
    assert report["ok"], (
        f"the campaign (seed {SEED}) found: {json.dumps(report['findings'], indent=2)}; logs in "
        f"{report['logs']}"
    )
