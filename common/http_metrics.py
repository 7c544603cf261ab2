"""What every Vendue server (BBS, auctioneer, rep) counts of the requests it answers, under the same names:

- `vendue_http_request_duration_seconds{method, route, status}` (histogram): seconds from the request's
  arrival to the start of its answer. `route` is the route template (`/v1/desired_lrps/{process_guid}`),
  never the raw path, so guids and cell ids do not grow the label set; a path no route matches is
  `unmatched`. An event stream counts until its headers go out, not for as long as it lasts.
- `vendue_refused_requests_total{reason}` (counter): requests answered with a refusal, by why. The
  authorization middleware names its reasons (common/auth.py: `no_identity`, `bad_token`,
  `token_unverified`, `bad_certificate`, `forbidden`, `no_rule`) and a handler may name its own
  (`mark_refusal`, e.g. `fenced`: a write under a stale fencing token); any other refusal is named by
  its status (REASONS_BY_STATUS: `invalid` for a 422, `quota` for a 429, ...). The probes' 503 (not
  ready) is an answer, not a refusal.

`HTTPMetrics` holds them in a service's registry; one ASGI middleware counts into them, installed outermost
(`add_http_metrics`, after every other middleware) so that it sees the answers of the request limits and
of the authorization too. Its cost is one histogram observation per request, whatever the request carries.
"""

# Not prometheus-fastapi-instrumentator: its series are `http_request_duration_seconds{handler, method,
# status}` with statuses grouped as "2xx", and `http_requests_total`, where operators' dashboards and the
# README's metrics table read the two above. Keeping these names would mean writing both as its custom
# instrumentations, as much code as this middleware, plus a scan of the app's routes per request (this
# reads the router's own match) and a dependency.

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import REFUSAL_SCOPE_KEY, route_template
from .limits import PROBES

UNMATCHED = "unmatched"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
REASONS_BY_STATUS = {
    401: "unauthenticated",
    403: "forbidden",
    409: "conflict",
    413: "too_large",
    422: "invalid",
    429: "quota",
    503: "unavailable",
    504: "timeout",
}


class HTTPMetrics:
    """The two series, in a service's own registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.latency = Histogram(
            "vendue_http_request_duration_seconds",
            "Seconds from a request's arrival to the start of its answer, by route template and status",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._refused = Counter(
            "vendue_refused_requests",
            "Requests refused (authentication, authorization, fencing, quota, invalid input, limits), "
            "by reason",
            ["reason"],
            registry=registry,
        )

    def refused(self, reason: str) -> None:
        self._refused.labels(reason).inc()


def mark_refusal(scope: Scope, reason: str) -> None:
    """Name why this request is refused, for `vendue_refused_requests_total` (else its status names it)."""
    scope[REFUSAL_SCOPE_KEY] = reason


def refusal_reason(scope: Scope, status: int) -> str | None:
    reason = scope.get(REFUSAL_SCOPE_KEY)
    if reason is not None:
        return reason
    if scope["path"] in PROBES:
        return None
    return REASONS_BY_STATUS.get(status)


class HTTPMetricsMiddleware:
    def __init__(self, app: ASGIApp, *, metrics: HTTPMetrics, routes: Callable[[], Iterable[Any]]) -> None:
        self.app = app
        self.metrics = metrics
        self._routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status, answered_at = 500, 0.0

        async def sending(message: Message) -> None:
            nonlocal status, answered_at
            if message["type"] == "http.response.start" and not answered_at:
                status, answered_at = message["status"], time.perf_counter()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            elapsed = (answered_at or time.perf_counter()) - started
            self.metrics.latency.labels(scope["method"], self._route(scope), str(status)).observe(elapsed)
            reason = refusal_reason(scope, status)
            if reason is not None:
                self.metrics.refused(reason)

    def _route(self, scope: Scope) -> str:
        """The template the router matched; for a request refused before routing, looked up here (only
        refusals and unknown paths pay for the lookup)."""
        route = scope.get("route")
        path = getattr(route, "path", None) if route is not None else route_template(self._routes(), scope)
        return path or UNMATCHED


def add_http_metrics(app: Any, metrics: HTTPMetrics) -> None:
    """Install the middleware on a FastAPI app, outermost but for the request id (common/request_id.py):
    call it after every other add_middleware, then add_request_id.
    `metrics` belongs to the service (several apps of one service, in tests, share its series)."""
    app.add_middleware(HTTPMetricsMiddleware, metrics=metrics, routes=lambda: app.router.routes)
