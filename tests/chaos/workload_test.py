from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from . import workload as workload_module
from .ledger import ACKNOWLEDGED, NOT_SENT, UNKNOWN, Ledger
from .workload import Workload

URLS = ["https://bbs-1", "https://bbs-2"]


def workload_with(handler, tmp_path: Path) -> tuple[Workload, Ledger]:
    ledger = Ledger()
    workload = Workload(URLS, True, ledger, random.Random(1), tmp_path, "t")
    workload.http.close()
    workload.http = httpx.Client(transport=httpx.MockTransport(handler))
    return workload, ledger


def test_a_replica_that_takes_no_connection_is_skipped_and_none_means_not_sent(tmp_path: Path) -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.host)
        if request.url.host == "bbs-1":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(201, json={})

    workload, ledger = workload_with(handler, tmp_path)
    write = workload.send("desire", "a", 1, "POST", "/v1/desired_lrps", {})
    assert write.outcome == ACKNOWLEDGED and "bbs-2" in seen

    def no_handshake(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("no TLS handshake in time", request=request)

    workload, ledger = workload_with(no_handshake, tmp_path)
    assert workload.send("delete", "a", None, "DELETE", "/v1/desired_lrps/a", None).outcome == NOT_SENT


def test_an_unknown_outcome_quarantines_the_app_until_it_is_resolved(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"instances": 2, "timeout": True}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH" and state["timeout"]:
            raise httpx.ReadTimeout("no answer", request=request)
        if request.method == "GET":
            return httpx.Response(200, json={"instances": state["instances"]})
        return httpx.Response(200, json={})

    workload, ledger = workload_with(handler, tmp_path)
    workload.apps["a"] = 2
    assert workload.scale("a").outcome == UNKNOWN
    for _ in range(20):  # never written to while quarantined
        assert workload.step().guid != "a"
    monkeypatch.setattr(workload_module, "RESOLVE_AFTER_S", 0.0)
    state["instances"] = 3  # the timed-out scale happened after all
    resolve = workload.step()
    assert (resolve.kind, resolve.guid, resolve.instances, resolve.outcome) == (
        "resolve",
        "a",
        3,
        ACKNOWLEDGED,
    )
    assert ledger.expectations().lrps["a"] == frozenset({3}) and workload.apps["a"] == 3
