"""Filters: each constraint on where work may go, written once (see base.py) and registered once
(registry.py); every strategy, the fast and the reference engines and the diagnosis ask them."""

from .base import Example, Filter, RequestFilter, StaticFilter, Work
from .compatibility import PLACEMENT_TAGS, STACK, VOLUME_DRIVERS, placement_tag_error
from .devices import DEVICES
from .ingress import INGRESS_IP
from .labels import LABELS
from .registry import (
    COMPATIBILITY,
    REQUEST,
    RESOURCES,
    admitted,
    feasible_positions,
    filter_chain,
    first_rejection,
    invalid_request,
    rejection_stages,
    request_filters,
    requirement,
)
from .resources import CONTAINERS, DISK, MEMORY, has_room, least_free
from .volumes import VOLUMES

__all__ = [
    "COMPATIBILITY",
    "CONTAINERS",
    "DEVICES",
    "DISK",
    "INGRESS_IP",
    "LABELS",
    "MEMORY",
    "PLACEMENT_TAGS",
    "REQUEST",
    "RESOURCES",
    "STACK",
    "VOLUMES",
    "VOLUME_DRIVERS",
    "Example",
    "Filter",
    "RequestFilter",
    "StaticFilter",
    "Work",
    "admitted",
    "feasible_positions",
    "filter_chain",
    "first_rejection",
    "has_room",
    "least_free",
    "invalid_request",
    "placement_tag_error",
    "rejection_stages",
    "request_filters",
    "requirement",
]
