"""Diego's routes as data: path, request and response messages, handler, and whether it writes (who may call
it: policy.py). Every call is a POST; a `.r2` path is the older form of a read, served the same (Vendue has
none of the fields Diego's versions tell apart). The event streams are events.py's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .handlers import Call, actual_lrps, cells, desired_lrps, tasks
from .pb import diego_pb2 as pb

Handler = Callable[[Call, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class DiegoRoute:
    path: str
    request: Any  # the request's message class; None: the body is not read
    response: Any  # the response's message class (its field 1 is the error)
    handler: Handler
    writes: bool = False


def _both(paths: tuple[str, ...], request: Any, response: Any, handler: Handler) -> list[DiegoRoute]:
    return [DiegoRoute(path, request, response, handler) for path in paths]


ROUTES: tuple[DiegoRoute, ...] = (
    DiegoRoute("/v1/ping", None, pb.PingResponse, cells.ping),
    DiegoRoute("/v1/cells/list.r1", None, pb.CellsResponse, cells.cells),
    DiegoRoute("/v1/domains/list", None, pb.DomainsResponse, cells.domains),
    DiegoRoute("/v1/domains/upsert", pb.UpsertDomainRequest, pb.UpsertDomainResponse, cells.upsert_domain,
               writes=True),
    # desired LRPs
    *_both(("/v1/desired_lrps/list.r3", "/v1/desired_lrps/list.r2"), pb.DesiredLRPsRequest,
           pb.DesiredLRPsResponse, desired_lrps.desired_lrps),
    *_both(("/v1/desired_lrps/get_by_process_guid.r3", "/v1/desired_lrps/get_by_process_guid.r2"),
           pb.DesiredLRPByProcessGuidRequest, pb.DesiredLRPResponse, desired_lrps.desired_lrp),
    DiegoRoute("/v1/desired_lrp_scheduling_infos/list", pb.DesiredLRPsRequest,
               pb.DesiredLRPSchedulingInfosResponse, desired_lrps.scheduling_infos),
    DiegoRoute("/v1/desired_lrp_scheduling_infos/get_by_process_guid", pb.DesiredLRPByProcessGuidRequest,
               pb.DesiredLRPSchedulingInfoByProcessGuidResponse, desired_lrps.scheduling_info_by_guid),
    DiegoRoute("/v1/desired_lrp_routing_infos/list", pb.DesiredLRPsRequest, pb.DesiredLRPRoutingInfosResponse,
               desired_lrps.routing_infos),
    DiegoRoute("/v1/desired_lrp/desire.r2", pb.DesireLRPRequest, pb.DesiredLRPLifecycleResponse,
               desired_lrps.desire, writes=True),
    DiegoRoute("/v1/desired_lrp/update", pb.UpdateDesiredLRPRequest, pb.DesiredLRPLifecycleResponse,
               desired_lrps.update, writes=True),
    DiegoRoute("/v1/desired_lrp/remove", pb.RemoveDesiredLRPRequest, pb.DesiredLRPLifecycleResponse,
               desired_lrps.remove, writes=True),
    # actual LRPs
    DiegoRoute("/v1/actual_lrps/list", pb.ActualLRPsRequest, pb.ActualLRPsResponse, actual_lrps.actual_lrps),
    DiegoRoute("/v1/actual_lrps/list_by_process_guids", pb.ActualLRPsByProcessGuidsRequest,
               pb.ActualLRPsResponse, actual_lrps.by_process_guids),
    DiegoRoute("/v1/actual_lrps/retire", pb.RetireActualLRPRequest, pb.ActualLRPLifecycleResponse,
               actual_lrps.retire, writes=True),
    # tasks
    *_both(("/v1/tasks/list.r3", "/v1/tasks/list.r2"), pb.TasksRequest, pb.TasksResponse, tasks.tasks),
    *_both(("/v1/tasks/get_by_task_guid.r3", "/v1/tasks/get_by_task_guid.r2"), pb.TaskByGuidRequest,
           pb.TaskResponse, tasks.task),
    DiegoRoute("/v1/tasks/desire.r2", pb.DesireTaskRequest, pb.TaskLifecycleResponse, tasks.desire,
               writes=True),
    DiegoRoute("/v1/tasks/cancel", pb.TaskGuidRequest, pb.TaskLifecycleResponse, tasks.cancel, writes=True),
    DiegoRoute("/v1/tasks/resolving", pb.TaskGuidRequest, pb.TaskLifecycleResponse, tasks.resolving,
               writes=True),
    DiegoRoute("/v1/tasks/delete", pb.TaskGuidRequest, pb.TaskLifecycleResponse, tasks.delete, writes=True),
)
