"""The lifecycle JSON written from plain reports is byte for byte what the wire models would write."""

from __future__ import annotations

from common.models import (
    CellLifecycle,
    ClaimedInstance,
    CrashReport,
    HostLifecycle,
    InstanceRef,
    PortMapping,
    RunningInstanceReport,
    TaskCompletion,
)

from .reports import Crash, Port, Ref, Reports, Running, host_json


def to_model(reports: Reports) -> CellLifecycle:
    """The wire model of plain reports (the rep itself only writes their JSON)."""
    return CellLifecycle(
        claimed=[ClaimedInstance(**r._asdict()) for r in reports.claimed],
        running=[
            RunningInstanceReport(
                process_guid=r.process_guid,
                index=r.index,
                instance_guid=r.instance_guid,
                host=r.host,
                ports=[PortMapping(container_port=p.container_port, host_port=p.host_port) for p in r.ports],
            )
            for r in reports.running
        ],
        crashed=[CrashReport(**r._asdict()) for r in reports.crashed],
        removed=[InstanceRef(**r._asdict()) for r in reports.removed],
        tasks_started=list(reports.tasks_started),
        tasks_completed=list(reports.tasks_completed),
    )


def plain(model: CellLifecycle) -> Reports:
    """The plain form of a wire model."""
    return Reports(
        [Ref(r.process_guid, r.index, r.instance_guid, r.version) for r in model.claimed],
        [Running(r.process_guid, r.index, r.instance_guid, r.host, list(r.ports)) for r in model.running],
        [Crash(r.process_guid, r.index, r.instance_guid, r.reason) for r in model.crashed],
        [Ref(r.process_guid, r.index, r.instance_guid) for r in model.removed],
        list(model.tasks_started),
        list(model.tasks_completed),
    )

# Strings that need escaping (quotes, backslashes, control characters, non-ASCII) as pydantic writes them.
ODD = 'a"b\\c\n\t\x01\x7f é ✓ 😀 </script>'


def every_kind() -> CellLifecycle:
    return CellLifecycle(
        claimed=[ClaimedInstance(process_guid="web", index=0, instance_guid="g0"),
                 ClaimedInstance(process_guid="api-1", index=7, instance_guid="g7", version=3)],
        running=[
            RunningInstanceReport(process_guid="web", index=0, instance_guid="g0", host="10.0.0.5",
                                  ports=[PortMapping(container_port=8080, host_port=40001),
                                         PortMapping(container_port=2222, host_port=40002)]),
            RunningInstanceReport(process_guid="web", index=1, instance_guid="g1", host="h", ports=[]),
        ],
        crashed=[CrashReport(process_guid="web", index=2, instance_guid="g2", reason=ODD)],
        removed=[InstanceRef(process_guid="web", index=3, instance_guid="g3")],
        tasks_started=["t1", "t-2.x_y"],  # guids: no character needs escaping (common.models.Guid)
        tasks_completed=[
            TaskCompletion(task_guid="t0", exit_status=0, result="ok"),
            TaskCompletion(task_guid="t9", failed=True, failure_reason=ODD),
        ],
    )


def one_cell(model: CellLifecycle) -> bytes:
    """The host body of one cell reporting `model`, as the model writes it."""
    return HostLifecycle(cells={"c": model}).model_dump_json().encode()


def test_a_cell_body_equals_the_models_json() -> None:
    model = every_kind()
    assert host_json([("c", plain(model))]) == one_cell(model)
    assert host_json([("c", Reports())]) == one_cell(CellLifecycle()), "empty lists written too"


def test_plain_records_and_sim_ports_write_the_same_body() -> None:
    reports = Reports(
        claimed=[Ref("web", 0, "g0")],
        running=[Running("web", 0, "g0", "127.0.0.1", [Port(8080, 40000)])],
        crashed=[Crash("web", 1, "g1", "exited with status 1")],
        removed=[Ref("web", 1, "g1")],
    )
    model = to_model(reports)
    assert model.running[0].ports == [PortMapping(container_port=8080, host_port=40000)]
    assert host_json([("c", reports)]) == one_cell(model)
    assert to_model(plain(model)) == model, "plain form and model convert both ways"


def test_a_host_body_equals_the_models_json() -> None:
    cells = [("cell-0", plain(every_kind())), ("cell-1", Reports(tasks_started=["t"])), ("c-2", Reports())]
    expected = HostLifecycle(cells={cell_id: to_model(r) for cell_id, r in cells}).model_dump_json().encode()
    assert host_json(cells) == expected
    assert host_json([]) == HostLifecycle(cells={}).model_dump_json().encode()
    parsed = HostLifecycle.model_validate_json(host_json(cells))
    assert parsed.cells["cell-0"] == every_kind(), "the BBS reads back exactly what was reported"


def test_then_keeps_older_reports_ahead_field_by_field() -> None:
    older = Reports(claimed=[Ref("a", 0, "g0")], tasks_started=["t0"])
    newer = Reports(
        claimed=[Ref("a", 1, "g1")], running=[Running("a", 0, "g0", "h", [])], tasks_started=["t1"]
    )
    both = older.then(newer)
    assert [r.index for r in both.claimed] == [0, 1] and both.tasks_started == ["t0", "t1"]
    assert len(both) == 5 and len(older) == 2, "the parts are left as they were"
