"""Calls the BBS makes: start requests to the auctioneer, stops and cancels to reps, task callbacks.

None of these is on a client's request path. A send that fails is logged and left to convergence:
the instances stay UNCLAIMED and the tasks PENDING, and the next pass auctions them again.
Auctioneer sends are coalesced: whatever was queued while the previous POST ran goes in the next one.
They go to the holder of the "auctioneer" lease when there is one (its URL, cached for a moment and
read again after a failed send), else to the configured auctioneer URL.

Completion callbacks go out with a client of their own that carries no identity (`callback_http_client`);
over TLS a request to a rep is sent only to a server whose certificate is that rep's
(`rep_checked_transport`).

Stops, cancels and cordons are batched per rep process (the one rep API: POST {rep_url}/stop, /cancel,
/cordon, the body naming each cell): everything queued for a process in one burst (one transaction's
effects, one convergence pass) goes in one request.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Literal

import httpcore
import httpx
from pydantic import BaseModel, ValidationError

from common.models import (
    CancelTasks,
    CellCordon,
    CellDetail,
    CordonCells,
    HostCellDetails,
    InstanceStop,
    StopInstances,
    TaskCancel,
)
from common.retry import AUCTIONEER_SENDS, retrying
from common.tls import CertError, peer_rep_refusal

from .metrics import BBSMetrics
from .records import CellRecord

log = logging.getLogger("bbs.outbound")

JSON_HEADERS = {"content-type": "application/json"}

REP_CONCURRENCY = 64
LEADER_CACHE_S = 1.0  # how long a looked-up lease holder's URL is used before it is looked up again
REP_BATCH_MAX = 10_000  # stops (or cancels) per request to one rep process
# Cells named per state request to one rep process: 100 ids of at most 128 characters keep the request's head
# under 16 KB, which any HTTP server takes.
REP_STATE_CELLS_MAX = 100

# A rep process: (its root URL, its id). Stops and cancels queued for it travel together.
RepKey = tuple[str, str]
RepVerb = Literal["stop", "cancel", "cordon"]
# The body of a batch of each verb (the one rep API's StopInstances, CancelTasks and CordonCells).
REP_BATCHES: dict[RepVerb, Callable[[list[Any]], BaseModel]] = {
    "stop": lambda stops: StopInstances.model_construct(instances=stops),
    "cancel": lambda cancels: CancelTasks.model_construct(tasks=cancels),
    "cordon": lambda cordons: CordonCells.model_construct(cells=cordons),
}

def callback_http_client(timeout: float, ca: Path | None = None) -> httpx.AsyncClient:
    """The client completion callbacks go out with: no client certificate (a callback URL is anyone's
    choice, so it must never be called as the BBS), and servers verified against the system's trust store,
    or only against the `ca` bundle when given (`--callback-ca`), never against the cluster CA unless that
    is the bundle given. No proxies from the environment, no redirects followed."""
    try:
        context = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise CertError(f"callback_ca: cannot load {ca}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return httpx.AsyncClient(timeout=timeout, verify=context, trust_env=False, follow_redirects=False,
                             limits=httpx.Limits(max_connections=100, max_keepalive_connections=10))


# The cells the server at the other end must be the rep of, for the request this task is making (None: the
# request is not to a rep). Read by RepCheckedStream before each write.
EXPECTED_REP_CELLS: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "expected_rep_cells", default=None
)


class NotTheRep(httpx.ConnectError):
    """The server at a rep_url is not the rep of the cells the request is about: nothing was sent."""


class RepCheckedStream(httpcore.AsyncNetworkStream):
    """A connection that, before sending a byte of a request to a rep (EXPECTED_REP_CELLS set), checks that
    the server's certificate is that rep's (common.tls.rep_refusal). Checked on every request, not once per
    connection: a pooled connection to one rep_url may be reused for a request about other cells."""

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        cells = EXPECTED_REP_CELLS.get()
        if cells is not None:
            refusal = peer_rep_refusal(self._inner.get_extra_info("ssl_object"), cells)
            if refusal is not None:
                raise NotTheRep(f"refused to talk to the rep of {', '.join(cells)}: {refusal}")
        await self._inner.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return RepCheckedStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class RepCheckedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with every stream a RepCheckedStream."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Any = None,
                          ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return RepCheckedStream(stream)

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None,
                                  ) -> httpcore.AsyncNetworkStream:
        return RepCheckedStream(await self._inner.connect_unix_socket(path, timeout, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def rep_checked_transport(verify: ssl.SSLContext, limits: httpx.Limits) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose requests made with EXPECTED_REP_CELLS set reach only that rep (the BBS's
    outbound client over TLS: bbs/server.py). httpx takes no network backend, so its pool's is wrapped. No
    proxy from the environment: the control plane talks to its peers directly."""
    transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits)
    pool = transport._pool
    pool._network_backend = RepCheckedBackend(pool._network_backend)
    return transport


# The elected auctioneer's URL, or None when no auctioneer holds the lease (then the configured URL is used).
FindAuctioneer = Callable[[], Awaitable[str | None]]


class Outbound:
    def __init__(
        self,
        auctioneer_url: str,
        metrics: BBSMetrics,
        *,
        timeout: float = 5.0,
        attempts: int = 3,
        retry_window_s: float = 0.0,
        client: httpx.AsyncClient | None = None,
        callback_client: httpx.AsyncClient | None = None,
        callback_ca: Path | None = None,
        find_auctioneer: FindAuctioneer | None = None,
    ) -> None:
        """A start request is tried `attempts` times, and for at least `retry_window_s` (the BBS passes
        the lease TTL plus a second): when the elected auctioneer dies, its lease still names it until
        it expires, and the request must survive until a standby holds the lease, rather than wait for
        convergence to find it stale.

        `client` carries the BBS's identity (its certificate) to the auctioneer and the reps; completion
        callbacks go out with `callback_client`, which carries none (default: `callback_http_client(timeout,
        callback_ca)`)."""
        self.auctioneer_url = auctioneer_url.rstrip("/")
        self._find_auctioneer = find_auctioneer
        self._leader_url: str | None = None
        self._leader_until = 0.0  # monotonic
        self.metrics = metrics
        self.attempts = attempts
        self.retry_window_s = retry_window_s
        self.client = client or httpx.AsyncClient(
            timeout=timeout, limits=httpx.Limits(max_connections=100, max_keepalive_connections=50)
        )
        self.callback_client = callback_client or callback_http_client(timeout, callback_ca)
        self._lrps: list[dict[str, Any]] = []
        self._tasks: list[dict[str, Any]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._rep_slots = asyncio.Semaphore(REP_CONCURRENCY)
        # (verb, rep) -> the stops or cancels queued for the rep process's next request of that verb
        self._rep_queues: dict[tuple[RepVerb, RepKey], list[Any]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._sender: asyncio.Task[None] | None = None
        # When (epoch s) start requests last could not be delivered: convergence then auctions at once what
        # is UNCLAIMED or PENDING instead of taking it to be in flight (bbs/operations/convergence.py).
        self.auction_lost_at = 0.0

    def set_find_auctioneer(self, find: FindAuctioneer) -> None:
        """Send start requests to the elected auctioneer `find` names (when it names one)."""
        self._find_auctioneer = find

    def start(self) -> None:
        if self._sender is None:
            self._sender = asyncio.create_task(self._send_loop(), name="bbs-auctioneer-sender")

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
            self._sender = None
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.client.aclose()
        await self.callback_client.aclose()

    # --- the auctioneer ---------------------------------------------------------------------------

    def auction_lrps(self, requests: Iterable[dict[str, Any]]) -> None:
        """Queue LRPStartRequests (as JSON data) for the auctioneer."""
        self._lrps.extend(requests)
        self._kick_sender()

    def auction_tasks(self, requests: Iterable[dict[str, Any]]) -> None:
        """Queue TaskStartRequests (as JSON data) for the auctioneer."""
        self._tasks.extend(requests)
        self._kick_sender()

    def _kick_sender(self) -> None:
        if self._lrps or self._tasks:
            self._idle.clear()
            self._wake.set()

    async def idle(self, timeout: float) -> None:
        """Wait until the auctioneer queue is empty (tests and shutdown)."""
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            lrps, self._lrps = self._lrps, []
            tasks, self._tasks = self._tasks, []
            try:
                if lrps:
                    await self._post_auctioneer("/v1/lrps", lrps, "lrps")
                if tasks:
                    await self._post_auctioneer("/v1/tasks", tasks, "tasks")
            except Exception:  # the sender must outlive any one bad send; convergence retries it
                self.auction_lost()
                log.exception("auctioneer send failed unexpectedly")
            if not self._lrps and not self._tasks:
                self._idle.set()

    def auction_lost(self) -> None:
        """Start requests were not delivered (none of the tries got through)."""
        self.auction_lost_at = time.time()

    async def _auctioneer_base(self) -> str:
        """The lease holder's URL (cached for LEADER_CACHE_S), else the configured one."""
        if self._find_auctioneer is None:
            return self.auctioneer_url
        now = time.monotonic()
        if now >= self._leader_until:
            try:
                self._leader_url = await self._find_auctioneer()
            except Exception:  # the database is briefly unavailable: the last known holder is the best guess
                log.warning("looking up the auctioneer lease failed", exc_info=True)
            # Only a found holder is kept: an auctioneer electing itself is used from its first renewal.
            self._leader_until = now + LEADER_CACHE_S if self._leader_url else 0.0
        return (self._leader_url or self.auctioneer_url).rstrip("/")

    async def _post_auctioneer(self, path: str, body: list[dict[str, Any]], kind: str) -> None:
        attempts = 0
        try:
            async for attempt in retrying(AUCTIONEER_SENDS, attempts=self.attempts,
                                          at_least_s=self.retry_window_s, on=httpx.HTTPError):
                with attempt:
                    attempts += 1
                    try:
                        response = await self.client.post(await self._auctioneer_base() + path, json=body)
                        response.raise_for_status()
                    except httpx.HTTPError:
                        self._leader_until = 0.0  # the holder may have changed: look it up again
                        self.metrics.auctioneer_requests.labels(kind=kind, outcome="error").inc()
                        raise
            self.metrics.auctioneer_requests.labels(kind=kind, outcome="ok").inc()
        except httpx.HTTPError as exc:
            self.auction_lost()
            log.warning(
                "auctioneer send failed; convergence will retry",
                extra={
                    "data": {
                        "path": path,
                        "items": len(body),
                        "error": repr(exc),
                        "attempts": attempts,
                    }
                },
            )

    # --- reps and callbacks -----------------------------------------------------------------------

    def stop_instance(self, cell: CellRecord, process_guid: str, instance_guid: str) -> None:
        """Queue a stop for the cell's rep; the burst's stops for one rep process go in one request."""
        self._queue("stop", cell, InstanceStop(cell_id=cell.cell_id, process_guid=process_guid,
                                               instance_guid=instance_guid))

    def cancel_task(self, cell: CellRecord, task_guid: str) -> None:
        """Queue a cancel for the cell's rep; the burst's cancels for one rep process go in one request."""
        self._queue("cancel", cell, TaskCancel(cell_id=cell.cell_id, task_guid=task_guid))

    def cordon_cell(self, cell: CellRecord, cordoned: bool) -> None:
        """Tell the cell's rep the operator (un)cordoned it, so that it refuses (or takes) work at once; a rep
        that does not hear it learns it from its next heartbeat's answer."""
        self._queue("cordon", cell, CellCordon(cell_id=cell.cell_id, cordoned=cordoned))

    def _queue(self, verb: RepVerb, cell: CellRecord, item: InstanceStop | TaskCancel | CellCordon) -> None:
        key = (verb, (cell.rep_url.rstrip("/"), cell.rep_id))
        queued = self._rep_queues.get(key)
        if queued is None:  # the first of a burst: the send runs once the burst's caller has queued the rest
            queued = self._rep_queues[key] = []
            self._spawn(self._send_queued(key))
        queued.append(item)

    async def _send_queued(self, key: tuple[RepVerb, RepKey]) -> None:
        verb, rep = key
        items = self._rep_queues.pop(key)
        for first in range(0, len(items), REP_BATCH_MAX):
            batch = items[first : first + REP_BATCH_MAX]
            body = REP_BATCHES[verb](batch)
            EXPECTED_REP_CELLS.set(tuple(dict.fromkeys(item.cell_id for item in batch)))  # this task's own
            await self._rep_request(rep, verb, body.model_dump_json().encode())

    async def _rep_request(self, rep: RepKey, verb: RepVerb, body: bytes) -> bool:
        """One stop, cancel or cordon batch to a rep process (POST {rep_url}/stop, /cancel or /cordon)."""
        return await self._post(f"{rep[0]}/{verb}", body, verb)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _post(self, url: str, body: bytes | dict[str, Any], kind: str,
                    client: httpx.AsyncClient | None = None) -> bool:
        """POST (JSON bytes, or data written as JSON) to a rep or a callback URL; True on a 2xx answer."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with self._rep_slots:
            try:
                response = await (client or self.client).post(url, content=content, headers=JSON_HEADERS)
                response.raise_for_status()
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                self.metrics.rep_requests.labels(kind=kind, outcome="error").inc()
                log.info("request failed", extra={"data": {"kind": kind, "url": url, "error": repr(exc)}})
                return False
            self.metrics.rep_requests.labels(kind=kind, outcome="ok").inc()
            return True

    async def cells_instances(self, cells: Iterable[CellRecord]) -> dict[str, set[str]]:
        """The instance guids each cell holds, asked of each rep process once (per REP_STATE_CELLS_MAX of
        its cells): GET {rep_url}/state?lrps=full&cells=a,b. A cell whose rep does not answer, or no longer
        hosts it, is left out."""
        by_rep: dict[str, list[str]] = {}
        for cell in cells:
            by_rep.setdefault(cell.rep_url.rstrip("/"), []).append(cell.cell_id)
        asks = [(url, ids[first : first + REP_STATE_CELLS_MAX])
                for url, ids in by_rep.items() for first in range(0, len(ids), REP_STATE_CELLS_MAX)]
        answers = await asyncio.gather(*(self._instances_of(url, ids) for url, ids in asks))
        return {cell_id: held for answer in answers for cell_id, held in answer.items()}

    async def _instances_of(self, rep_url: str, cell_ids: list[str]) -> dict[str, set[str]]:
        """One rep process's answer for these cells of it: each named cell it hosts -> its instance guids."""
        expected = EXPECTED_REP_CELLS.set(tuple(cell_ids))
        try:
            params = {"lrps": "full", "cells": ",".join(cell_ids)}
            response = await self.client.get(f"{rep_url}/state", params=params)
            response.raise_for_status()
            details = HostCellDetails.model_validate_json(response.content).cells
        except (httpx.HTTPError, ValidationError) as exc:
            self.metrics.rep_requests.labels(kind="state", outcome="error").inc()
            log.info("cell state fetch failed", extra={"data": {"rep_url": rep_url, "error": repr(exc)}})
            return {}
        finally:
            EXPECTED_REP_CELLS.reset(expected)
        self.metrics.rep_requests.labels(kind="state", outcome="ok").inc()
        named = set(cell_ids)
        return {d.bid.cell_id: {lrp.instance_guid for lrp in d.lrps}
                for d in details if d.bid.cell_id in named}

    async def cell_detail(self, cell: CellRecord, timeout: float) -> CellDetail | None:
        """One cell in detail from its rep process (GET {rep_url}/state?lrps=full&cells=C) within `timeout`
        seconds; None when the rep does not answer, errs, or no longer hosts the cell (bbs/cell_probes.py)."""
        expected = EXPECTED_REP_CELLS.set((cell.cell_id,))
        try:
            response = await self.client.get(f"{cell.rep_url.rstrip('/')}/state",
                                              params={"lrps": "full", "cells": cell.cell_id}, timeout=timeout)
            response.raise_for_status()
            details = HostCellDetails.model_validate_json(response.content).cells
        except (httpx.HTTPError, httpx.InvalidURL, ValidationError) as exc:
            self.metrics.rep_requests.labels(kind="state", outcome="error").inc()
            log.info("cell state fetch failed", extra={"data": {"cell_id": cell.cell_id, "error": repr(exc)}})
            return None
        finally:
            EXPECTED_REP_CELLS.reset(expected)
        self.metrics.rep_requests.labels(kind="state", outcome="ok").inc()
        return next((d for d in details if d.bid.cell_id == cell.cell_id), None)

    async def task_callback(self, url: str, task: dict[str, Any]) -> bool:
        """POST the Task to its completion_callback_url with the client that carries no identity; True on a
        2xx answer."""
        return await self._post(url, task, "callback", self.callback_client)

    def spawn(self, coroutine: Any) -> None:
        """Run a coroutine in the background, cancelled at close."""
        self._spawn(coroutine)

    async def drain(self, timeout: float) -> None:
        """Wait for queued sends and background calls to finish (tests, shutdown)."""
        await self.idle(timeout)
        if self._background:
            await asyncio.wait(list(self._background), timeout=timeout)
