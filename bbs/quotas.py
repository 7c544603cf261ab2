"""What one BBS (one cluster) takes at most: desired LRPs, instances, event subscribers, and where task
callbacks may go. Past a quota a request is refused with 429 naming the limit, and nothing is written.

The counts are read in the write transaction that would add to them, which holds the cluster-wide write
lock (bbs/store/store.py): two replicas cannot both take the last place.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from common.urls import callback_refusal

# The scale benchmark desires 5,000 LRPs and 250,000 instances: the defaults leave room for 20 and 4 times
# that.
DEFAULT_MAX_LRPS = 100_000
DEFAULT_MAX_INSTANCES = 1_000_000
DEFAULT_MAX_EVENT_SUBSCRIBERS = 256
DEFAULT_MAX_EXPLANATIONS = 20_000  # about 1 KB each


class QuotaOptions(BaseModel):
    """The BBS's quotas (a mixin of BBSSettings): `--max-lrps`, `--max-instances`,
    `--max-event-subscribers`, `--max-explanations`, `--callback-allow HOST` (VENDUE_MAX_LRPS, ...)."""

    max_lrps: int = Field(default=DEFAULT_MAX_LRPS, ge=0)
    max_instances: int = Field(default=DEFAULT_MAX_INSTANCES, ge=0)
    max_event_subscribers: int = Field(default=DEFAULT_MAX_EVENT_SUBSCRIBERS, ge=0)
    # Placement explanations kept in memory for `vendue why` (bbs/explanations.py), latest per instance.
    max_explanations: int = Field(default=DEFAULT_MAX_EXPLANATIONS, ge=0, le=10_000_000)
    # Hosts a task's completion_callback_url may name although they are link-local or a metadata service.
    callback_allow: list[str] = Field(default_factory=list)


class QuotaExceeded(Exception):
    """429: the request would take the cluster past a limit (the message names it)."""


def desire_refusal(options: QuotaOptions, lrps: int, instances: int, wanted: int) -> str | None:
    """Why a new desired LRP of `wanted` instances must be refused when `lrps` desired LRPs hold
    `instances` instances, or None: it fits."""
    if lrps + 1 > options.max_lrps:
        return f"quota: at most {options.max_lrps} desired LRPs (max_lrps); {lrps} exist"
    if instances + wanted > options.max_instances:
        return (f"quota: at most {options.max_instances} instances in total (max_instances); {instances} are "
                f"desired, this adds {wanted}")
    return None


def check_scale(options: QuotaOptions, instances: int, before: int, after: int) -> None:
    """Raise QuotaExceeded when scaling one LRP from `before` to `after` instances takes the total
    (`instances`, `before` among them) past max_instances. Scaling down always fits."""
    if after > before and instances - before + after > options.max_instances:
        raise QuotaExceeded(f"quota: at most {options.max_instances} instances in total (max_instances); "
                            f"{instances} are desired, this adds {after - before}")


def callback_problem(options: QuotaOptions, url: str | None) -> str | None:
    """Why the BBS must not POST a finished task to `url`, or None."""
    return None if url is None else callback_refusal(url, options.callback_allow)
