"""The BBS client's own logic: error mapping, SSE parsing, request shapes (the BBS itself is faked by an
httpx MockTransport here; deploy/client_cmd_test.py runs the client against a real BBS process)."""

from __future__ import annotations

import json

import httpx
import pytest

from common.models import DesiredLRPCreate, TaskCreate, TokenCreate
from common.retry import Backoff

from .bbs_client import (
    BBSClient,
    BBSError,
    BBSUnreachable,
    ClientAuth,
    Conflict,
    EventQuery,
    InvalidRequest,
    NotFound,
    Refused,
    describe_errors,
    event_from_sse,
)

NOW = "2024-01-01T00:00:00Z"


def client_answering(handler) -> BBSClient:
    return BBSClient("http://bbs.test", transport=httpx.MockTransport(handler))


def test_describe_errors_names_the_wire_field_without_fastapi_location_prefix():
    errors = [
        {"loc": ["body", "memory_mb"], "msg": "Input should be greater than or equal to 1"},
        {"loc": ["body", "health_check", "type"], "msg": "Input should be 'port', 'process' or 'http'"},
        {"loc": [], "msg": "bad body"},
    ]
    assert describe_errors(errors) == [
        "memory_mb: Input should be greater than or equal to 1",
        "health_check.type: Input should be 'port', 'process' or 'http'",
        "body: bad body",
    ]


def test_a_422_becomes_invalid_request_with_one_message_per_field():
    detail = [{"loc": ["body", "instances"], "msg": "Input should be less than or equal to 10000",
               "type": "less_than_equal"}]
    with client_answering(lambda request: httpx.Response(422, json={"detail": detail})) as bbs:
        with pytest.raises(InvalidRequest) as caught:
            bbs.desire_lrp(DesiredLRPCreate(process_guid="web", command=["x"]))
    assert caught.value.errors == ["instances: Input should be less than or equal to 10000"]
    assert caught.value.status == 422


@pytest.mark.parametrize(("status", "error"), [(404, NotFound), (409, Conflict), (500, BBSError)])
def test_other_failures_map_to_their_exception_and_keep_the_detail(status, error):
    with client_answering(lambda request: httpx.Response(status, json={"detail": "nope"})) as bbs:
        with pytest.raises(error) as caught:
            bbs.desired_lrp("web")
    assert caught.value.status == status
    assert "nope" in str(caught.value) and "/v1/desired_lrps/web" in str(caught.value)


@pytest.mark.parametrize("status", [401, 403])
def test_a_refusal_is_its_status_and_the_reason_the_bbs_gave(status):
    detail = "role reader (viewer) may not POST /v1/desired_lrps: only admin"
    with client_answering(lambda request: httpx.Response(status, json={"detail": detail})) as bbs:
        with pytest.raises(Refused) as caught:
            bbs.desire_lrp(DesiredLRPCreate(process_guid="web", command=["x"]))
    assert (caught.value.status, str(caught.value)) == (status, f"{status}: {detail}")


def test_a_token_travels_as_a_bearer_header_on_every_request():
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"items": []})

    with BBSClient(
        "http://bbs.test", transport=httpx.MockTransport(record), auth=ClientAuth(token="t0k")
    ) as bbs:
        bbs.desired_lrps()
        bbs.cell_details("http://rep.test:1800")
    assert [(r.url.host, r.headers.get("authorization")) for r in seen] == [
        ("bbs.test", "Bearer t0k"), ("rep.test", "Bearer t0k")]


def test_cell_details_ask_a_rep_process_once_for_every_cell_it_hosts():
    seen: list[httpx.Request] = []
    total = {"memory_mb": 1024, "disk_mb": 2048, "containers": 10}
    hosted = [{"bid": {"cell_id": f"sim0-{i}", "zone": "z0", "total": total, "available": total},
               "rep_url": "https://rep.test:1800"} for i in range(2)]

    def rep(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        named = request.url.params.get("cells")
        return httpx.Response(200, json={"cells": [c for c in hosted
                                                   if not named or c["bid"]["cell_id"] in named]})

    with client_answering(rep) as bbs:
        every = bbs.cell_details("https://rep.test:1800")
        one = bbs.cell_details("https://rep.test:1800", ["sim0-1"])
    assert sorted(every) == ["sim0-0", "sim0-1"] and every["sim0-1"].bid.total.memory_mb == 1024
    assert list(one) == ["sim0-1"]
    assert [dict(r.url.params) for r in seen] == [{"lrps": "full"}, {"lrps": "full", "cells": "sim0-1"}]
    with client_answering(lambda request: httpx.Response(503)) as bbs:
        assert bbs.cell_details("https://rep.test:1800") == {}, "a rep that does not answer with them: none"


def test_no_answer_is_unreachable():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with client_answering(refuse) as bbs, pytest.raises(BBSUnreachable, match="cannot reach the BBS"):
        bbs.ping()


def test_requests_carry_the_wire_body_and_query():
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/tasks":
            body = json.loads(request.content)
            return httpx.Response(201, json={**body, "created_at": NOW, "updated_at": NOW})
        return httpx.Response(200, json={"items": []})

    with client_answering(record) as bbs:
        task = bbs.desire_task(TaskCreate(task_guid="t1", command=["echo", "hi"], memory_mb=64))
        assert bbs.actual_lrps(process_guid="web", state="RUNNING") == []
    assert json.loads(seen[0].content) == {"task_guid": "t1", "command": ["echo", "hi"], "memory_mb": 64}
    assert task.task_guid == "t1" and task.memory_mb == 64
    assert dict(seen[1].url.params) == {"process_guid": "web", "state": "RUNNING"}


def test_token_requests_carry_the_wire_body_and_never_send_an_unset_expiry():
    seen: list[httpx.Request] = []
    info = {
        "id": "abc",
        "role": "reader",
        "name": "ci",
        "created_at": 1.0,
        "expires_at": None,
        "revoked": False,
    }

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "POST":
            return httpx.Response(201, json={**info, "token": "vdt_secret"})
        if request.method == "GET":
            return httpx.Response(200, json={"items": [info]})
        return httpx.Response(404, json={"detail": "no token with id 'abc'"})

    with client_answering(record) as bbs:
        created = bbs.create_token(TokenCreate(role="reader", name="ci"))
        bbs.create_token(TokenCreate(role="reader", name="link", expires_in_s=60, purpose="login"))
        listed = bbs.tokens()
        with pytest.raises(NotFound):
            bbs.revoke_token("abc")
    assert json.loads(seen[0].content) == {"role": "reader", "name": "ci"}
    assert json.loads(seen[1].content) == {"role": "reader", "name": "link", "expires_in_s": 60,
                                           "purpose": "login"}
    assert (created.token, created.id) == ("vdt_secret", "abc")
    assert [t.id for t in listed] == ["abc"] and not hasattr(listed[0], "token")
    assert (seen[3].method, seen[3].url.path) == ("DELETE", "/v1/tokens/abc")


def test_events_skip_comments_join_multiline_data_and_drop_an_event_the_stream_cut_short():
    whole = {"type": "task_created", "data": {"a": 1}, "at": NOW}
    cut = {"type": "task_removed", "data": {}, "at": NOW}
    lines = "".join(f"data: {line}\n" for line in json.dumps(whole, indent=1).splitlines())
    body = (f": keep-alive\n\nid: e-1\nevent: task_created\n{lines}\n"
            f": heartbeat\n\nid: e-2\nevent: task_removed\ndata: {json.dumps(cut)}\n")
    with client_answering(
        lambda request: httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})
    ) as bbs:
        received = [(e.type, e.data) for e in bbs.events()]
    assert received == [("task_created", {"a": 1})]


def test_event_from_sse_reads_the_whole_event_or_wraps_a_bare_payload():
    whole = event_from_sse("task_created", json.dumps({"type": "task_created", "data": {"task_guid": "t"},
                                                       "at": NOW}))
    assert (whole.type, whole.data) == ("task_created", {"task_guid": "t"})
    bare = event_from_sse("cell_appeared", json.dumps({"cell_id": "cell-0"}))
    assert (bare.type, bare.data) == ("cell_appeared", {"cell_id": "cell-0"})


def test_events_follows_the_stream():
    body = "".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind, 'data': {'n': n}, 'at': NOW})}\n\n"
        for n, kind in enumerate(["desired_lrp_created", "actual_lrp_changed"])
    )
    with client_answering(
        lambda request: httpx.Response(
            200, text=": hi\n\n" + body, headers={"content-type": "text/event-stream"}
        )
    ) as bbs:
        received = [(e.type, e.data) for e in bbs.events()]
    assert received == [("desired_lrp_created", {"n": 0}), ("actual_lrp_changed", {"n": 1})]


def sse(*events: tuple[str, str]) -> str:
    """SSE text of (id, type) events, as the BBS writes them."""
    return "".join(
        f"id: {i}\nevent: {kind}\ndata: {json.dumps({'type': kind, 'data': {}, 'at': NOW, 'id': i})}\n\n"
        for i, kind in events
    )


def test_following_sends_filters_and_resumes_with_the_last_id_after_the_stream_ends(monkeypatch):
    monkeypatch.setattr("common.retry.EVENT_STREAM", Backoff(first_s=0.0, max_s=0.0))
    asked: list[tuple[str, str | None]] = []
    answers = [sse(("e-1", "task_created"), ("e-2", "task_changed")), sse(("e-3", "task_removed"))]

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append((str(request.url.query.decode()), request.headers.get("last-event-id")))
        if not answers:
            return httpx.Response(403, json={"detail": "role reader may not"})
        return httpx.Response(
            200, text=": connected\n\n" + answers.pop(0), headers={"content-type": "text/event-stream"}
        )

    reconnects: list[str] = []
    query = EventQuery(app="web", types=("task_created", "task_removed"))
    with client_answering(answer) as bbs, pytest.raises(Refused):
        for event in bbs.follow_events(query, on_reconnect=reconnects.append):
            assert event.id.startswith("e-")
    assert asked == [("app=web&type=task_created&type=task_removed", None),
                     ("app=web&type=task_created&type=task_removed", "e-2"),
                     ("app=web&type=task_created&type=task_removed", "e-3")]
    assert reconnects == ["the BBS closed the event stream"] * 2


def test_following_fails_at_once_when_the_first_connection_does():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with client_answering(refuse) as bbs, pytest.raises(BBSUnreachable):
        next(bbs.follow_events())


def test_an_event_whose_json_holds_a_unicode_line_separator_arrives_whole():
    # The BBS writes JSON strings unescaped (pydantic_core.to_json): a crash reason may hold U+2028.
    event = {"type": "actual_lrp_changed", "data": {"crash_reason": "a\u2028b\x85c"}, "at": NOW}
    body = f"event: actual_lrp_changed\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
    with client_answering(
        lambda request: httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})
    ) as bbs:
        received = [e.data for e in bbs.events()]
    assert received == [{"crash_reason": "a\u2028b\x85c"}]
