"""HTTP clients that fail over between BBS replicas: `--bbs-url http://a:8889,http://b:8899`.

    urls = split_urls("http://a:8889, http://b:8899")
    client = httpx.AsyncClient(base_url=urls[0], transport=AsyncFailoverTransport(urls))

Requests are written against the first URL (the client's base_url, or absolute URLs starting with any of
the listed ones); the transport sends each to the *current* replica and, when that one fails — a
transport error (refused, reset, timed out) or a 5xx answer — tries the others in turn. The first that
answers becomes current and stays current (sticky) until it fails in turn. When every replica fails, the
caller sees the last 5xx answer, or else the last transport error, exactly as with one URL.

Sending the same request to a second replica after a timeout or a 5xx may apply it twice; every BBS
call a component makes is retried anyway (heartbeats, lifecycle reports, lease renewals, failure
reports), so the BBS API already takes repeats. Requests for other hosts pass through untouched.
"""

from __future__ import annotations

import logging

import httpx

log = logging.getLogger("failover")


class URLListError(ValueError):
    """A comma-separated URL list with an empty entry, or no URL at all."""


def split_urls(text: str) -> list[str]:
    """"http://a:1, http://b:2/" -> ["http://a:1", "http://b:2"] (trailing slashes dropped)."""
    urls = [part.strip().rstrip("/") for part in text.split(",")]
    if not urls or not all(urls):
        raise URLListError(f"expected one URL or several comma-separated, got {text!r}")
    return urls


def first_url(text: str) -> str:
    """The first URL of a comma-separated list (the one requests are written against)."""
    return split_urls(text)[0]


class _Replicas:
    """The replicas' URLs, which one is current, and how a request for one is sent to another."""

    def __init__(self, urls: list[str] | str) -> None:
        listed = split_urls(urls) if isinstance(urls, str) else [u.rstrip("/") for u in urls]
        if not listed:
            raise URLListError("no URL given")
        self.urls = [httpx.URL(url) for url in listed]
        self.current = 0
        self.switches = 0  # times the current replica changed

    def _base_of(self, url: httpx.URL) -> tuple[int, bytes] | None:
        """(index of the replica this URL points at, the rest of its path) or None if it is none of them."""
        for index, base in enumerate(self.urls):
            prefix = base.raw_path.rstrip(b"/")
            if (url.scheme, url.host, url.port) == (base.scheme, base.host, base.port) and (
                    url.raw_path == prefix or url.raw_path.startswith(prefix + b"/")
                    or url.raw_path.startswith(prefix + b"?")):
                return index, url.raw_path[len(prefix):]
        return None

    def plan(self, request: httpx.Request) -> list[tuple[int, httpx.Request]] | None:
        """The request as sent to each replica, the current one first; None: not for these replicas."""
        found = self._base_of(request.url)
        if found is None or len(self.urls) == 1:
            return None
        rest = found[1]
        order = [(self.current + i) % len(self.urls) for i in range(len(self.urls))]
        return [(index, self._aimed(request, self.urls[index], rest)) for index in order]

    @staticmethod
    def _aimed(request: httpx.Request, base: httpx.URL, rest: bytes) -> httpx.Request:
        url = request.url.copy_with(scheme=base.scheme, host=base.host, port=base.port,
                                    raw_path=base.raw_path.rstrip(b"/") + rest)
        headers = request.headers.copy()
        headers["host"] = url.netloc.decode("ascii")
        return httpx.Request(request.method, url, headers=headers, stream=request.stream,
                             extensions=request.extensions)

    def settle(self, index: int, failed: list[str], *, succeeded: bool, first_unreachable: bool) -> None:
        """Replica `index` gave the answer the caller gets: it becomes current when it succeeded, or when it
        answered 5xx while the first one tried did not answer at all (an answering replica is a better
        first try than an unreachable one, whose connect timeout every request would pay)."""
        if index == self.current or not (succeeded or first_unreachable):
            return
        before, self.current = self.current, index
        self.switches += 1
        log.warning("BBS replica failed; using the next one", extra={"data": {
            "from": str(self.urls[before]), "to": str(self.urls[index]), "errors": failed[:3]}})

    @staticmethod
    def describe(url: httpx.URL, outcome: httpx.Response | Exception) -> str:
        if isinstance(outcome, httpx.Response):
            return f"{url}: HTTP {outcome.status_code}"
        return f"{url}: {type(outcome).__name__} {outcome}".rstrip()


class _Attempt:
    """One request's way through the replicas (the bookkeeping both transports share): each failure is
    noted, an answer is either handed to the caller or kept as the fallback while the next replica is
    tried, and `outcome()` is what the caller gets when no replica answered well."""

    def __init__(self, replicas: _Replicas, plan: list[tuple[int, httpx.Request]]) -> None:
        self.replicas = replicas
        self.plan = plan
        self.failures: list[str] = []
        self.error: Exception | None = None
        self.first_unreachable = False
        self.fallback: tuple[httpx.Response, int] | None = None

    def unreachable(self, position: int, aimed: httpx.Request, exc: Exception) -> None:
        self.error = exc
        self.first_unreachable = self.first_unreachable or position == 0
        self.failures.append(self.replicas.describe(aimed.url, exc))

    def answered(self, position: int, index: int, aimed: httpx.Request, response: httpx.Response) -> bool:
        """True: give the caller this response now (success, or every replica failed: the last answer,
        as with one URL). False: try the next replica; the caller reads this error body (kept in case
        no replica does better)."""
        if response.status_code < 500 or position == len(self.plan) - 1:
            self.replicas.settle(index, self.failures, succeeded=response.status_code < 500,
                                 first_unreachable=self.first_unreachable)
            return True
        self.failures.append(self.replicas.describe(aimed.url, response))
        self.fallback = (response, index)
        return False

    def outcome(self) -> httpx.Response:
        """No replica answered well: the last 5xx answer, or else the last transport error (raised)."""
        if self.fallback is not None:
            response, index = self.fallback
            self.replicas.settle(
                index, self.failures, succeeded=False, first_unreachable=self.first_unreachable
            )
            return response
        assert self.error is not None
        raise self.error


class AsyncFailoverTransport(httpx.AsyncBaseTransport):
    """An httpx.AsyncClient transport over several replicas (see the module docstring)."""

    def __init__(
        self, urls: list[str] | str, inner: httpx.AsyncBaseTransport | None = None, **options
    ) -> None:
        """`options` (verify, limits, trust_env, ...) build the inner AsyncHTTPTransport when none is
        given."""
        self.replicas = _Replicas(urls)
        self._inner = inner or httpx.AsyncHTTPTransport(**options)

    @property
    def current_url(self) -> str:
        return str(self.replicas.urls[self.replicas.current]).rstrip("/")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        plan = self.replicas.plan(request)
        if plan is None:
            return await self._inner.handle_async_request(request)
        await request.aread()  # a body that can be sent more than once
        attempt = _Attempt(self.replicas, plan)
        for position, (index, aimed) in enumerate(plan):
            try:
                response = await self._inner.handle_async_request(aimed)
            except httpx.TransportError as exc:
                attempt.unreachable(position, aimed, exc)
                continue
            if attempt.answered(position, index, aimed, response):
                return response
            await response.aread()
        return attempt.outcome()

    async def aclose(self) -> None:
        await self._inner.aclose()


class FailoverTransport(httpx.BaseTransport):
    """The synchronous twin (httpx.Client: the CLI's BBS client)."""

    def __init__(self, urls: list[str] | str, inner: httpx.BaseTransport | None = None, **options) -> None:
        self.replicas = _Replicas(urls)
        self._inner = inner or httpx.HTTPTransport(**options)

    @property
    def current_url(self) -> str:
        return str(self.replicas.urls[self.replicas.current]).rstrip("/")

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        plan = self.replicas.plan(request)
        if plan is None:
            return self._inner.handle_request(request)
        request.read()
        attempt = _Attempt(self.replicas, plan)
        for position, (index, aimed) in enumerate(plan):
            try:
                response = self._inner.handle_request(aimed)
            except httpx.TransportError as exc:
                attempt.unreachable(position, aimed, exc)
                continue
            if attempt.answered(position, index, aimed, response):
                return response
            response.read()
        return attempt.outcome()

    def close(self) -> None:
        self._inner.close()
