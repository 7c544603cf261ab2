"""A small, typed, synchronous client for the BBS HTTP API (the CLI's and the demo's only way in).

Every method speaks the wire models of common/models/. Failures are one exception family:

- `BBSUnreachable`: no answer at all (connection refused, timeout).
- `InvalidRequest`: 422; `.errors` holds one "field: message" string per problem.
- `Refused` (401, 403: who the caller is, or what its role may do), `NotFound` (404), `Conflict` (409),
  and `BBSError` for any other non-2xx answer.

How it proves who it is (`ClientAuth`): a client certificate from the cluster CA, or a bearer token with
only the CA to check the BBS's certificate by; nothing for an insecure (plain HTTP) cluster.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from common import sse
from common.failover import FailoverTransport, split_urls

# The models and the TLS helpers are imported by the methods that use them: a client command builds only
# the models it reads (all of them cost about 0.1 s of start-up; deploy/startup_test.py).
if TYPE_CHECKING:
    from common.models import (
        ActualLRP,
        CellDetail,
        CellPresence,
        DesiredLRP,
        DesiredLRPCreate,
        DesiredLRPUpdate,
        Event,
        PlacementExplanation,
        RebalancePlan,
        RebalanceRequest,
        RebalanceStatus,
        Task,
        TaskCreate,
        TokenCreate,
        TokenCreated,
        TokenInfo,
    )
    from common.tls import TLSFiles

DEFAULT_BBS_URL = "http://127.0.0.1:8889"
FOLLOW_GIVE_UP_S = 30.0  # follow_events: a BBS (every replica) silent this long is gone
BLOB_IDLE_TIMEOUT_S = 60.0  # upload_blob: the BBS stores a large body as it arrives, a chunk at a time

ModelT = TypeVar("ModelT", bound=BaseModel)


class BBSError(Exception):
    """The BBS answered, but not with success."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class BBSUnreachable(BBSError):
    """No answer from the BBS at all."""


class Refused(BBSError):
    """401 (no identity the BBS accepts) or 403 (the caller's role may not do this)."""


class NotFound(BBSError):
    pass


class Conflict(BBSError):
    pass


class InvalidRequest(BBSError):
    """A 422 (or a local validation failure before sending): `errors` is one "field: why" per problem."""

    def __init__(self, errors: Sequence[str], status: int | None = 422) -> None:
        super().__init__("; ".join(errors), status)
        self.errors = list(errors)


def _field_name(loc: Sequence[Any]) -> str:
    # FastAPI prefixes the location with where the value came from ("body", "query", "path"); the
    # wire name is what follows. An empty remainder means the body as a whole.
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def describe_errors(errors: Sequence[Mapping[str, Any]]) -> list[str]:
    """pydantic/FastAPI error dicts -> ["memory_mb: Input should be greater than or equal to 1", ...]."""
    return [f"{_field_name(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors]


def invalid_from_validation_error(exc: ValidationError) -> InvalidRequest:
    """A local pydantic failure, worded exactly like the BBS's 422 would be."""
    return InvalidRequest(describe_errors(exc.errors()), status=None)


def _error_from_response(response: httpx.Response) -> BBSError:
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("detail") if isinstance(body, dict) else None
    if response.status_code == 422 and isinstance(detail, list):
        return InvalidRequest(describe_errors(detail))
    text = detail if isinstance(detail, str) else (response.text.strip() or response.reason_phrase)
    if response.status_code in (401, 403):  # the detail names the role and the rule, or what is missing
        return Refused(f"{response.status_code}: {text}", response.status_code)
    message = f"{response.request.method} {response.request.url.path}: {response.status_code} {text}"
    if response.status_code == 404:
        return NotFound(message, 404)
    if response.status_code == 409:
        return Conflict(message, 409)
    if response.status_code == 422:
        return InvalidRequest([str(text)])
    return BBSError(message, response.status_code)


def event_from_sse(event_type: str, data: str) -> Event:
    """The BBS sends the whole Event as `data`; a bare payload is wrapped so either shape works."""
    from common.models import Event

    payload = json.loads(data)
    if isinstance(payload, dict) and {"type", "data", "at"} <= payload.keys():
        return Event.model_validate(payload)
    return Event(type=event_type, data=payload if isinstance(payload, dict) else {"value": payload},
                 at=datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """Who a client is to the cluster: its certificate (`tls`: cert, key and the cluster CA), or a bearer
    `token` with only the CA (`ca`) to check the servers by. Neither: plain HTTP to an insecure cluster, or
    the system's CAs."""

    tls: TLSFiles | None = None
    ca: Path | None = None
    token: str | None = None

    def verify(self) -> ssl.SSLContext | bool:
        """httpx's `verify` (raises common.tls.CertError when the files cannot be used)."""
        if self.tls is None and self.ca is None:
            return True
        from common.tls import client_context

        return client_context(self.tls, ca=self.ca)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


class BBSClient:
    """`with BBSClient(url) as bbs: bbs.desired_lrps()` — one pooled httpx.Client underneath."""

    def __init__(self, base_url: str = DEFAULT_BBS_URL, timeout: float = 10.0,
                 transport: httpx.BaseTransport | None = None, auth: ClientAuth | None = None) -> None:
        """`base_url` may list several BBS replicas, comma-separated: each request goes to the one that
        answers (common/failover.py). `base_url` is then what the messages name: all of them. `auth`: the
        certificate or token every request carries (also those to the reps, `cell_details`)."""
        urls = split_urls(base_url)
        self.base_url = ", ".join(urls)
        auth = auth or ClientAuth()
        verify = auth.verify()
        self._first_url = urls[0]
        if len(urls) > 1:
            transport = FailoverTransport(urls, inner=transport, verify=verify)
        self._failover = transport if isinstance(transport, FailoverTransport) else None
        self._http = httpx.Client(base_url=urls[0], timeout=timeout, transport=transport, verify=verify,
                                  headers=auth.headers())

    def close(self) -> None:
        self._http.close()

    def current_url(self) -> str:
        """The URL of the BBS replica in use (the one that answered last), for links a person opens."""
        return self._failover.current_url if self._failover is not None else self._first_url

    def __enter__(self) -> BBSClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ---------------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, json_body: Any = None,
                 params: Mapping[str, str] | None = None, **extra: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, json=json_body, params=params, **extra)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise BBSUnreachable(f"cannot reach the BBS at {self.base_url}: {reason}") from exc
        if response.is_error:
            raise _error_from_response(response)
        return response

    def _items(self, path: str, model: type[ModelT], params: Mapping[str, str] | None = None) -> list[ModelT]:
        body = self._request("GET", path, params=params).json()
        return [model.model_validate(item) for item in body["items"]]

    @staticmethod
    def _filters(**given: str | None) -> dict[str, str]:
        return {name: value for name, value in given.items() if value}

    # --- the API ----------------------------------------------------------------------------------

    def ping(self) -> dict[str, Any]:
        return dict(self._request("GET", "/ping").json())

    def desire_lrp(self, lrp: DesiredLRPCreate) -> DesiredLRP:
        from common.models import DesiredLRP

        body = lrp.model_dump(mode="json", exclude_unset=True)
        body["process_guid"] = lrp.process_guid  # always sent, even if a default someday
        return DesiredLRP.model_validate(self._request("POST", "/v1/desired_lrps", json_body=body).json())

    def desired_lrps(self) -> list[DesiredLRP]:
        from common.models import DesiredLRP

        return self._items("/v1/desired_lrps", DesiredLRP)

    def desired_lrp(self, process_guid: str) -> DesiredLRP:
        from common.models import DesiredLRP

        return DesiredLRP.model_validate(self._request("GET", f"/v1/desired_lrps/{process_guid}").json())

    def update_desired_lrp(self, process_guid: str, update: DesiredLRPUpdate) -> DesiredLRP:
        from common.models import DesiredLRP

        body = update.model_dump(mode="json", exclude_none=True)
        answer = self._request("PATCH", f"/v1/desired_lrps/{process_guid}", json_body=body).json()
        # A DesiredLRPChange (docs/rollouts.md); a BBS from before versions answered the DesiredLRP alone.
        return DesiredLRP.model_validate(answer.get("desired_lrp", answer))

    def remove_desired_lrp(self, process_guid: str) -> None:
        self._request("DELETE", f"/v1/desired_lrps/{process_guid}")

    # --- versions, rollouts, restarts (docs/rollouts.md) ------------------------------------------

    def replace_desired_lrp(self, process_guid: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole definition (and an optional `rollout` strategy): a DesiredLRPChange."""
        return dict(self._request("PUT", f"/v1/desired_lrps/{process_guid}", json_body=body).json())

    def patch_desired_lrp(self, process_guid: str, body: dict[str, Any]) -> dict[str, Any]:
        """PATCH some fields (and an optional `rollout` strategy): a DesiredLRPChange."""
        return dict(self._request("PATCH", f"/v1/desired_lrps/{process_guid}", json_body=body).json())

    def get_rollout(self, process_guid: str) -> dict[str, Any] | None:
        """The latest rollout of the app (a Rollout), None when it never had one."""
        try:
            return dict(self._request("GET", f"/v1/desired_lrps/{process_guid}/rollout").json())
        except NotFound:
            self.desired_lrp(process_guid)  # the app itself missing is NotFound too
            return None

    def app_events(self, process_guid: str) -> dict[str, Any]:
        """The app's last events, kept per app by the BBS, and its restart policy (an AppEvents)."""
        return dict(self._request("GET", f"/v1/desired_lrps/{process_guid}/events").json())

    def list_rollouts(self, process_guid: str) -> list[dict[str, Any]]:
        """The app's rollouts, newest first (the last few)."""
        body = self._request("GET", f"/v1/desired_lrps/{process_guid}/rollouts").json()
        return list(body["rollouts"])

    def list_versions(self, process_guid: str) -> list[dict[str, Any]]:
        """The app's versions, newest first (LRPVersion: version, created_at, current, definition)."""
        body = self._request("GET", f"/v1/desired_lrps/{process_guid}/versions").json()
        return list(body["versions"])

    def rollout_action(self, process_guid: str, action: Literal["pause", "resume", "undo"]) -> dict[str, Any]:
        """Pause, resume or undo the app's rollout: the Rollout after it (Conflict: nothing to do so to)."""
        path = f"/v1/desired_lrps/{process_guid}/rollout/{action}"
        return dict(self._request("POST", path, json_body={}).json())

    def restart_lrp(self, process_guid: str, *, all_at_once: bool = False,
                    max_in_flight: int | str = 1) -> dict[str, Any]:
        """Restart every instance, rolling (or all at once): the restart's Rollout."""
        body = {"all_at_once": all_at_once, "max_in_flight": max_in_flight}
        return dict(self._request("POST", f"/v1/desired_lrps/{process_guid}/restart", json_body=body).json())

    def restart_instance(self, process_guid: str, index: int) -> None:
        """Stop one instance; the BBS places it again (NotFound: no such index)."""
        self._request("POST", f"/v1/desired_lrps/{process_guid}/instances/{index}/restart", json_body={})

    def actual_lrps(self, process_guid: str | None = None, cell_id: str | None = None,
                    state: str | None = None, presence: str | None = None) -> list[ActualLRP]:
        from common.models import ActualLRP

        params = self._filters(process_guid=process_guid, cell_id=cell_id, state=state, presence=presence)
        return self._items("/v1/actual_lrps", ActualLRP, params)

    def usage(self, process_guid: str | None = None, cell_id: str | None = None) -> dict[str, Any]:
        """GET /v1/usage: the instances' latest memory, CPU and disk figures (`items`) and the cells whose
        rep did not answer (`unreachable`)."""
        params = self._filters(process_guid=process_guid, cell_id=cell_id)
        answer: dict[str, Any] = self._request("GET", "/v1/usage", params=params).json()
        return answer

    def placement(self, process_guid: str, index: int) -> PlacementExplanation:
        """Why the instance is where it is (NotFound: the BBS knows no explanation)."""
        from common.models import PlacementExplanation

        path = f"/v1/actual_lrps/{process_guid}/{index}/placement"
        return PlacementExplanation.model_validate(self._request("GET", path).json())

    def desire_task(self, task: TaskCreate) -> Task:
        from common.models import Task

        body = task.model_dump(mode="json", exclude_unset=True)
        body["task_guid"] = task.task_guid
        body["command"] = task.command
        return Task.model_validate(self._request("POST", "/v1/tasks", json_body=body).json())

    def tasks(self, state: str | None = None, domain: str | None = None) -> list[Task]:
        from common.models import Task

        return self._items("/v1/tasks", Task, self._filters(state=state, domain=domain))

    def task(self, task_guid: str) -> Task:
        from common.models import Task

        return Task.model_validate(self._request("GET", f"/v1/tasks/{task_guid}").json())

    def cancel_task(self, task_guid: str) -> Task:
        from common.models import Task

        return Task.model_validate(self._request("POST", f"/v1/tasks/{task_guid}/cancel").json())

    def resolve_task(self, task_guid: str) -> None:
        self._request("DELETE", f"/v1/tasks/{task_guid}")

    def cells(self, *, expired: bool = False) -> list[CellPresence]:
        """The cell states, from the BBS alone (the reps' last heartbeats): present cells, or with `expired`
        also those whose presence expired."""
        from common.models import CellPresence

        return self._items("/v1/cells", CellPresence, {"all": "true"} if expired else None)

    def set_cell_mode(self, cell_id: str, mode: str) -> CellPresence:
        """Cordon, uncordon or drain a cell (admin): the cell state after (NotFound: no such cell)."""
        from common.models import CellPresence

        return CellPresence.model_validate(self._request("POST", f"/v1/cells/{cell_id}/{mode}").json())

    def rebalance(self, request: RebalanceRequest) -> RebalancePlan:
        """Plan rebalancing moves (admin) and, unless a dry run, have the BBS carry them out."""
        from common.models import RebalancePlan

        body = request.model_dump(mode="json", exclude_none=True)
        return RebalancePlan.model_validate(self._request("POST", "/v1/rebalance", json_body=body).json())

    def rebalance_status(self) -> RebalanceStatus:
        """The BBS's rebalancing moves queued, in flight and finished lately."""
        from common.models import RebalanceStatus

        return RebalanceStatus.model_validate(self._request("GET", "/v1/rebalance").json())

    def remove_cell(self, cell_id: str) -> None:
        """Forget a cell that is gone (admin): what it held is placed again (409 while it is present)."""
        self._request("DELETE", f"/v1/cells/{cell_id}")

    def cell_details(
        self, rep_url: str, cell_ids: Sequence[str] = (), timeout: float = 2.0
    ) -> dict[str, CellDetail]:
        """The cells a rep process hosts, in detail (GET {rep_url}/state?lrps=full, with this client's
        certificate or token), by cell id: those named, or every one (one request however many it hosts);
        empty when it does not answer with them."""
        from common.models import HostCellDetails

        params = {"lrps": "full", **({"cells": ",".join(cell_ids)} if cell_ids else {})}
        try:
            response = self._http.get(f"{rep_url}/state", params=params, timeout=timeout)
            response.raise_for_status()
            details = HostCellDetails.model_validate_json(response.content).cells
        except (httpx.HTTPError, ValidationError, ValueError):
            return {}
        return {detail.bid.cell_id: detail for detail in details}

    def blob_size(self, digest: str) -> int | None:
        """The size of the blob the store holds under `digest`, or None when it holds none (HEAD)."""
        try:
            response = self._request("HEAD", f"/v1/blobs/{digest}")
        except NotFound:
            return None
        return int(response.headers.get("content-length", "0"))

    def upload_blob(self, digest: str, body: Iterable[bytes], size: int,
                    timeout: float = BLOB_IDLE_TIMEOUT_S) -> dict[str, Any]:
        """PUT the bytes `body` yields (streamed: never held whole) as the blob `digest`, `size` bytes
        (sent as Content-Length, so the BBS refuses one over its cap before any byte); its description.
        `timeout` bounds each read and write, not the whole upload."""
        response = self._request("PUT", f"/v1/blobs/{digest}", content=body, timeout=timeout,
                                 headers={"content-length": str(size),
                                          "content-type": "application/octet-stream"})
        return dict(response.json())

    def blobs(self) -> list[dict[str, Any]]:
        """Every blob of the store (admin): digest, size, created_at, last_referenced_at, referenced_by."""
        return list(self._request("GET", "/v1/blobs").json()["items"])

    def delete_blob(self, digest: str) -> None:
        """Remove a blob (NotFound: none; Conflict: a desired LRP or task names it)."""
        self._request("DELETE", f"/v1/blobs/{digest}")

    def create_token(self, request: TokenCreate) -> TokenCreated:
        """A new bearer token (admin); its secret is in the answer and nowhere else."""
        from common.models import TokenCreated

        # Only what was set: a plain API token's body is what a BBS from before `purpose` accepts too.
        body = request.model_dump(mode="json", exclude_none=True, exclude_unset=True)
        return TokenCreated.model_validate(self._request("POST", "/v1/tokens", json_body=body).json())

    def tokens(self) -> list[TokenInfo]:
        from common.models import TokenInfo

        return self._items("/v1/tokens", TokenInfo)

    def revoke_token(self, token_id: str) -> None:
        self._request("DELETE", f"/v1/tokens/{token_id}")

    def events(
        self,
        read_timeout: float | None = None,
        wanted: EventQuery | None = None,
        last_event_id: str | None = None,
        on_open: Callable[[], None] = lambda: None,
    ) -> Iterator[Event]:
        """Follow the SSE stream until the server closes it (or the caller stops iterating): only what
        `wanted` asks for; with `last_event_id`, first what was missed since (or a `resync` event).
        `on_open()`: the BBS accepted the subscription."""
        timeout = httpx.Timeout(self._http.timeout.connect, read=read_timeout)
        headers = {
            "Accept": "text/event-stream",
            **({"Last-Event-ID": last_event_id} if last_event_id else {}),
        }
        try:
            with self._http.stream("GET", "/v1/events", timeout=timeout, headers=headers,
                                   params=(wanted or EventQuery()).params()) as response:
                if response.is_error:
                    response.read()
                    raise _error_from_response(response)
                on_open()
                for message in sse.events(response.iter_bytes()):
                    yield event_from_sse(message.type, message.data)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise BBSUnreachable(f"lost the BBS event stream at {self.base_url}: {reason}") from exc

    def logs(self, path: str, params: Mapping[str, str], follow: bool) -> Iterator[dict[str, Any]]:
        """GET /v1/logs/{process_guid} or /v1/tasks/{task_guid}/logs: each JSON line as it comes (the
        blank lines that keep a followed stream alive skipped)."""
        timeout = httpx.Timeout(self._http.timeout.connect, read=None if follow else self._http.timeout.read)
        try:
            with self._http.stream("GET", path, params=params, timeout=timeout) as response:
                if response.is_error:
                    response.read()
                    raise _error_from_response(response)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise BBSUnreachable(f"lost the log stream of the BBS at {self.base_url}: {reason}") from exc

    def follow_events(self, wanted: EventQuery | None = None, give_up_s: float = FOLLOW_GIVE_UP_S,
                      on_reconnect: Callable[[str], None] = lambda why: None,
                      on_open: Callable[[str], None] = lambda url: None) -> Iterator[Event]:
        """Follow the stream for good: when it ends or breaks (the BBS stopped, or died), connect again —
        to another replica when this client lists several and this one is gone (common/failover.py) —
        sending the last event's id as Last-Event-ID, so that what happened meanwhile comes first (or a
        `resync` event, from a replica that cannot tell). Gives up (BBSUnreachable) after `give_up_s`
        without an event, and at once when the first connection fails; a refusal (401, 403, 422, 429)
        ends it at once. `on_reconnect(why)` is told of each new attempt, `on_open(url)` of each
        subscription the BBS at `url` accepted."""
        last_id: str | None = None
        quiet_since = time.monotonic()
        from common.retry import EVENT_STREAM

        delays = EVENT_STREAM.delays()
        opened: list[str] = []

        def accepted() -> None:
            opened.append(self.current_url())
            on_open(opened[-1])

        while True:
            try:
                for event in self.events(wanted=wanted, last_event_id=last_id, on_open=accepted):
                    quiet_since = time.monotonic()
                    delays.reset()
                    last_id = event.id or last_id
                    yield event
                why = "the BBS closed the event stream"
            except BBSUnreachable as exc:
                if not opened:
                    raise
                why = str(exc)
            if time.monotonic() - quiet_since > give_up_s:
                raise BBSUnreachable(f"{why}; no event for {give_up_s:g}s, gave up")
            on_reconnect(why)
            time.sleep(next(delays))  # a retry's backoff (common/retry.py)


@dataclass(frozen=True, slots=True)
class EventQuery:
    """The filters of GET /v1/events: an app's, a cell's, some types' events only (empty: every event)."""

    app: str | None = None
    cell: str | None = None
    types: tuple[str, ...] = ()

    def params(self) -> httpx.QueryParams:
        given = [("app", self.app), ("cell", self.cell), *(("type", t) for t in self.types)]
        return httpx.QueryParams([(name, value) for name, value in given if value])
