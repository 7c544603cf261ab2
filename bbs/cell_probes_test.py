"""Cells asked what they hold, in the background: retried within the window, never more than one at a time."""

from __future__ import annotations

import asyncio

import pytest

from bbs import cell_probes
from bbs.cell_probes import CellProbes, Probe
from bbs.records import CellRecord
from common.models import CellDetail
from common.retry import Backoff

CELL = CellRecord("c1", {"rep_url": "http://c1"}, expires_at=0.0)


def detail(*instances: tuple[str, int], tasks: tuple[str, ...] = ()) -> CellDetail:
    size = {"memory_mb": 1, "disk_mb": 1, "containers": 1}
    return CellDetail.model_validate({
        "bid": {"cell_id": "c1", "zone": "z", "total": size, "available": size,
                "tasks": [{"task_guid": t, "memory_mb": 1, "disk_mb": 1} for t in tasks]},
        "rep_url": "http://c1",
        "lrps": [{"process_guid": pg, "index": i, "instance_guid": f"g{i}", "memory_mb": 1, "disk_mb": 1}
                 for pg, i in instances],
    })


class Rep:
    """Answers each attempt in turn from `answers` (None: no answer; an exception: raised), then the last."""

    def __init__(self, *answers: CellDetail | None | Exception) -> None:
        self.answers = list(answers)
        self.attempts: list[float] = []  # the timeout each attempt was given

    async def ask(self, cell: CellRecord, timeout: float) -> CellDetail | None:
        assert cell is CELL
        self.attempts.append(timeout)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


async def probed(rep: Rep, window_s: float = 2.0) -> tuple[CellProbes, Probe]:
    done = asyncio.Event()
    probes = CellProbes(rep.ask, window_s, on_done=done.set, clock=lambda: 123.0)
    probes.request([CELL])
    probes.request([CELL])  # already being probed: not a second probe
    await asyncio.wait_for(done.wait(), 10.0)
    return probes, probes.latest()["c1"]


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cell_probes, "CELL_PROBES", Backoff(first_s=0.05, max_s=0.05))


async def test_an_answer_says_what_the_cell_holds() -> None:
    rep = Rep(detail(("web", 0), ("api", 3), tasks=("t1",)))
    probes, probe = await probed(rep)
    assert probe == Probe(123.0, frozenset({("web", 0), ("api", 3)}), frozenset({"t1"})) and probe.answered
    assert len(rep.attempts) == 1 and 1.9 < rep.attempts[0] <= 2.0  # the attempt may take the whole window
    probes.keep_only({"c2"})
    assert probes.latest() == {}


async def test_a_silent_or_failing_rep_is_asked_again_within_the_window() -> None:
    rep = Rep(None, RuntimeError("boom"), detail(("web", 0)))
    _, probe = await probed(rep)
    assert probe.lrps == frozenset({("web", 0)}) and len(rep.attempts) == 3


async def test_no_answer_within_the_window_is_a_probe_without_one() -> None:
    rep = Rep(None)
    _, probe = await probed(rep, window_s=0.3)
    assert probe == Probe(123.0, None) and not probe.answered and len(rep.attempts) >= 2
