"""Completed tasks as history: kept --task-retention, at most --max-completed-tasks (the oldest go first);
a task with a completion callback keeps Diego's semantics (deleted once its callback got through, or after
expire_completed_task when it never does)."""

from __future__ import annotations

import dataclasses

from bbs.actual_set import ActualSet
from bbs.convergence import ConvergenceConfig, converge
from bbs.records import COMPLETED, RESOLVING, TaskRecord
from bbs.settings import BBSSettings

CONFIG = ConvergenceConfig(task_retention=86400.0, max_completed_tasks=3, expire_completed_task=120.0)


def done(guid: str, finished: float, callback_url: str = "", **fields: object) -> TaskRecord:
    definition = {"command": ["x"], **({"completion_callback_url": callback_url} if callback_url else {})}
    return TaskRecord(guid, "d", definition, state=COMPLETED, created_at=0.0,  # type: ignore[arg-type]
                      updated_at=finished, first_completed_at=finished, result="last words\n", **fields)


def deleted(tasks: list[TaskRecord], now: float, config: ConvergenceConfig = CONFIG) -> list[str]:
    return sorted(t.task_guid for t in converge([], ActualSet(), tasks, {}, now, config).task_deletes)


def test_the_defaults_keep_a_day_and_ten_thousand() -> None:
    settings = BBSSettings()
    assert (settings.task_retention, settings.max_completed_tasks) == (86400.0, 10_000)
    assert (ConvergenceConfig().task_retention, ConvergenceConfig().max_completed_tasks) == (86400.0, 10_000)


def test_a_completed_task_is_kept_for_the_retention_not_two_minutes() -> None:
    task = done("t1", 100.0, failed=True, failure_reason="exited with status 1")
    assert deleted([task], 100.0 + 121) == [], "kept past Diego's two minutes"
    assert deleted([task], 100.0 + 86399) == []
    assert deleted([task], 100.0 + 86400) == ["t1"]


def test_at_most_max_completed_tasks_are_kept_the_oldest_go_first() -> None:
    tasks = [done(f"t{i}", 100.0 + i) for i in range(5)]
    assert deleted(tasks, 200.0) == ["t0", "t1"]
    resolving = dataclasses.replace(tasks[4], state=RESOLVING)
    assert deleted([*tasks[:4], resolving], 200.0) == ["t0", "t1"], "RESOLVING counts as completed"
    # Those expired count once, not twice: three left after the expiry, none more deleted.
    assert deleted(tasks[2:], 100.0 + 2 + 86400) == ["t2"]
    assert deleted(tasks, 200.0, dataclasses.replace(CONFIG, max_completed_tasks=10)) == []


def test_a_task_with_a_callback_keeps_diego_semantics() -> None:
    task = done("cb", 100.0, callback_url="https://receiver.test/done", auctioned_at=100.0)
    out = converge([], ActualSet(), [task], {}, 100.0 + 30, CONFIG)
    assert [t.task_guid for t in out.callbacks] == ["cb"], "the callback is retried"
    assert out.task_deletes == []
    assert deleted([task], 100.0 + 120) == ["cb"], "forgotten after expire_completed_task, not kept a day"
    # Tasks with callbacks are not history: they do not push the others out.
    history = [done(f"t{i}", 100.0 + i) for i in range(3)]
    assert deleted([*history, task], 101.0) == []
