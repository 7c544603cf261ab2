"""The refusals an operation raises; bbs/api.py maps each to its HTTP status."""

from __future__ import annotations


class NotFound(Exception):
    """404: no such resource."""


class Conflict(Exception):
    """409: the resource's state does not allow the operation."""


class Fenced(Conflict):
    """A write under a fencing token older than its lease's current one (409, counted as `fenced`)."""
