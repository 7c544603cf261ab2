"""Simulated containers: one heap, one loop; starts, stops, crashes and tasks on a fake clock."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from common.models import DesiredLRP, ModificationTag, Task, TaskCompletion
from tests.support.executor_listener import Listener
from tests.support.polling import eventually

from .executor import LRPContainer, TaskContainer
from .sim_executor import SimExecutor

NOW = datetime(2024, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


DESIRED = DesiredLRP(
    process_guid="app", ports=[8080, 9090], created_at=NOW, modification_tag=ModificationTag(epoch="e")
)


def lrp(guid: str, cell_id: str = "cell-0") -> LRPContainer:
    return LRPContainer(cell_id=cell_id, instance_guid=guid, index=0, desired=DESIRED)


async def test_starts_report_running_after_the_delay() -> None:
    clock, listener = Clock(), Listener()
    sim = SimExecutor(start_delay_s=0.5, clock=clock)
    sim.start_lrp(lrp("a"), listener)
    sim.start_lrp(lrp("b"), listener)

    assert sim.fire_due() == 0 and listener.running == []
    clock.now += 0.5
    assert sim.fire_due() == 2

    assert [guid for guid, _ in listener.running] == ["a", "b"]
    ports = listener.running[0][1]
    assert [p.container_port for p in ports] == [8080, 9090]
    assert ports[0].host_port != ports[1].host_port


async def test_a_stopped_container_never_reports() -> None:
    clock, listener = Clock(), Listener()
    sim = SimExecutor(start_delay_s=0.5, crash_rate_per_s=100.0, clock=clock)
    sim.start_lrp(lrp("a"), listener)
    await sim.stop_lrp("a")
    clock.now += 10
    sim.fire_due()
    assert listener.running == [] and listener.crashed == []
    assert sim.running_count == 0


async def test_crashes_happen_at_the_configured_rate() -> None:
    clock, listener = Clock(), Listener()
    sim = SimExecutor(start_delay_s=0.0, crash_rate_per_s=1.0, seed=7, clock=clock)
    for i in range(1000):
        sim.start_lrp(lrp(f"g{i}"), listener)
    sim.fire_due(limit=10_000)
    assert len(listener.running) == 1000

    clock.now += 1.0
    sim.fire_due(limit=10_000)

    # P(crash within 1 s) = 1 - e^-1 ~ 0.632: 632 +- 5 sigma (~76).
    assert 550 < len(listener.crashed) < 715, f"expected ~632 crashes, saw {len(listener.crashed)}"
    assert listener.crashed[0][1] == "exited with status 1 (simulated crash)"
    assert sim.running_count == 1000 - len(listener.crashed)


async def test_tasks_complete_successfully_after_the_delay_unless_cancelled() -> None:
    clock, listener = Clock(), Listener()
    sim = SimExecutor(start_delay_s=0.2, clock=clock)
    for guid in ("t1", "t2"):
        sim.run_task(
            TaskContainer("cell-0", Task(task_guid=guid, command=["x"], created_at=NOW, updated_at=NOW)),
            listener,
        )
    await sim.cancel_task("t2")
    clock.now += 0.2
    sim.fire_due()
    assert listener.finished == [TaskCompletion(task_guid="t1", exit_status=0)]


async def test_the_loop_fires_on_real_time_and_wakes_for_earlier_entries() -> None:
    listener = Listener()
    sim = SimExecutor(start_delay_s=0.02)
    await sim.open()
    try:
        sim.start_lrp(lrp("a"), listener)
        await eventually(lambda: listener.running, 5.0, "a running report", lambda: listener.crashed)
    finally:
        await sim.close()


async def test_many_cells_share_one_executor_in_bulk() -> None:
    clock = Clock()
    sim = SimExecutor(start_delay_s=0.05, clock=clock)
    listeners = [Listener() for _ in range(100)]
    for c, listener in enumerate(listeners):
        for i in range(250):
            sim.start_lrp(lrp(f"{c}-{i}", cell_id=f"cell-{c}"), listener)
    clock.now += 0.05
    handled = 0
    while (n := sim.fire_due()) > 0:
        handled += n
    assert handled == 25_000
    assert all(len(listener.running) == 250 for listener in listeners)


async def test_events_fire_in_due_order_when_the_start_delay_changes() -> None:
    clock, listener = Clock(), Listener()
    sim = SimExecutor(start_delay_s=1.0, clock=clock)
    sim.start_lrp(lrp("slow"), listener)
    sim.start_lrp(lrp("slow-2"), listener)
    sim.start_delay_s = 0.2
    sim.start_lrp(lrp("quick"), listener)  # due before the ones queued earlier
    task = Task(task_guid="t", command=["x"], created_at=NOW, updated_at=NOW)
    sim.run_task(TaskContainer("cell-0", task), listener)  # due with "quick"

    clock.now += 0.2
    assert sim.fire_due() == 2
    assert [g for g, _ in listener.running] == ["quick"] and [c.task_guid for c in listener.finished] == ["t"]
    clock.now += 0.8
    assert sim.fire_due(limit=1) == 1, "the limit holds across both queues"
    assert sim.fire_due() == 1
    assert [g for g, _ in listener.running] == ["quick", "slow", "slow-2"]


async def test_the_loop_wakes_for_a_start_sooner_than_what_it_waits_for() -> None:
    listener = Listener()
    sim = SimExecutor(start_delay_s=30.0)
    await sim.open()
    try:
        sim.start_lrp(lrp("late"), listener)
        await asyncio.sleep(0)  # the loop now waits for "late", 30 s away
        sim.start_delay_s = 0.0
        sim.start_lrp(lrp("now"), listener)
        await eventually(lambda: listener.running, 5.0, "the loop woken for the sooner start")
        assert [g for g, _ in listener.running] == ["now"]
    finally:
        await sim.close()
