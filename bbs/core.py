"""The BBS assembled: one unit of work (bbs/unit_of_work.py) and the operations of each resource on it
(bbs/operations/). Nothing else lives here: an operation belongs to its resource's module."""

from __future__ import annotations

from collections.abc import Callable

from .cell_loss import CellLossConfig
from .convergence import ConvergenceConfig
from .events import EventHub
from .explanations import Explanations
from .images import ImagePinner
from .metrics import BBSMetrics
from .operations.actual_lrps import ActualLRPs
from .operations.auctions import Auctions
from .operations.blobs import Blobs
from .operations.cells import Cells
from .operations.convergence import Convergence
from .operations.desired_lrps import DesiredLRPs
from .operations.domains import Domains
from .operations.leases import Leases
from .operations.rebalancing import Rebalancing
from .operations.rollouts import Rollouts
from .operations.tasks import Tasks
from .operations.tokens import Tokens
from .outbound import Outbound
from .rebalancer import Rebalancer
from .restart_policy import RestartPolicy
from .rollouts import RolloutDriver
from .settings import BBSSettings
from .store import Store
from .unit_of_work import UnitOfWork


class BBS:
    def __init__(
        self, settings: BBSSettings, store: Store, outbound: Outbound, hub: EventHub, metrics: BBSMetrics
    ) -> None:
        self.settings, self.store, self.hub, self.metrics = settings, store, hub, metrics
        self.outbound = outbound
        self.uow = UnitOfWork(settings, store, outbound, hub, metrics)
        policy = RestartPolicy(
            immediate_restarts=settings.immediate_restarts,
            backoff_min=settings.crash_backoff_min,
            backoff_max=settings.crash_backoff_max,
            max_restarts=settings.max_restarts,
            reset_after=settings.crash_reset_after,
        )
        self.images = ImagePinner(settings.insecure_registry, settings.registry_ca, settings.registry_timeout)
        self.desired_lrps = DesiredLRPs(self.uow)
        self.actual_lrps = ActualLRPs(self.uow, policy)
        self.auctions = Auctions(self.uow, Explanations(settings.max_explanations))
        self.tasks = Tasks(self.uow)
        self.domains = Domains(self.uow)
        self.cells = Cells(self.uow)
        self.leases = Leases(self.uow)
        self.tokens = Tokens(self.uow)
        self.blobs = Blobs(self.uow)
        self.rebalancer = Rebalancer(self.uow)  # the moves this replica carries out
        self.rebalancing = Rebalancing(self.uow, self.rebalancer)
        self.rollouts = Rollouts(self.uow, self.images)
        self.rollout_driver = RolloutDriver(self.uow, self.rollouts)  # runs on the convergence leader
        self.convergence = Convergence(self.uow, ConvergenceConfig(
            stale_unclaimed=settings.stale_unclaimed,
            kick_task=settings.kick_task,
            expire_pending_task=settings.expire_pending_task,
            expire_completed_task=settings.expire_completed_task,
            task_retention=settings.task_retention,
            max_completed_tasks=settings.max_completed_tasks,
            forget_cell_after=settings.forget_cell_after,
            policy=policy,
            cell_loss=CellLossConfig(grace=settings.cell_loss_grace, check=settings.cell_loss_check),
        ))
        self.transport_ready: Callable[[], bool] = lambda: True  # NATS connected (when it is the transport)
