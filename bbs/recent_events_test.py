"""GET /v1/events/recent: the last events the hub kept, for a reader (the dashboard's session among them),
filtered and bounded; refused without a reader's identity. In process, authorization on."""

from __future__ import annotations

import time

from bbs.events import event
from common.models import TokenCreate


async def test_a_reader_gets_the_last_kept_events_filtered_and_bounded(bbs_http) -> None:
    bbs, http = bbs_http
    reader = await bbs.tokens.create(TokenCreate(role="reader", name="a script", expires_in_s=60))
    auth = {"Authorization": f"Bearer {reader['token']}"}
    bbs.hub.publish([event("auction_completed", {"duration_s": 0.01 * i}) for i in range(1, 6)])
    bbs.hub.publish([event("actual_lrp_changed", {"process_guid": "web", "index": 0, "crash_reason": "<b>"})])

    answer = await http.get("/v1/events/recent", params={"limit": 3}, headers=auth)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [e["type"] for e in body["items"]] == ["auction_completed"] * 2 + ["actual_lrp_changed"]
    assert body["last_event_id"] == bbs.hub.last_id == body["items"][-1]["id"]
    durations = await http.get("/v1/events/recent", params={"type": "auction_completed", "limit": 100},
                               headers=auth)
    assert [e["data"]["duration_s"] for e in durations.json()["items"]] == [0.01, 0.02, 0.03, 0.04, 0.05]
    of_web = await http.get("/v1/events/recent", params={"app": "web"}, headers=auth)
    assert [e["data"]["crash_reason"] for e in of_web.json()["items"]] == ["<b>"]

    for params, field in (({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"type": "nope"}, "type")):
        refused = await http.get("/v1/events/recent", params=params, headers=auth)
        assert refused.status_code == 422 and field in refused.text, (params, refused.text)


async def test_a_caller_without_a_reader_identity_is_refused(bbs_http) -> None:
    bbs, http = bbs_http
    assert (await http.get("/v1/events/recent")).status_code == 401
    login = await bbs.tokens.create(TokenCreate(role="reader", name="link", expires_in_s=60, purpose="login"))
    as_bearer = await http.get("/v1/events/recent", headers={"Authorization": f"Bearer {login['token']}"})
    assert as_bearer.status_code == 401, "a login token is not a bearer token"
    assert (await http.get("/ui/login", params={"token": login["token"]})).status_code == 303
    assert (await http.get("/v1/events/recent")).status_code == 200, "the dashboard's session reads it"


async def test_the_time_the_stream_did_not_cover_is_answered_from_the_stories(bbs_http) -> None:
    bbs, http = bbs_http
    reader = await bbs.tokens.create(TokenCreate(role="reader", name="on call", expires_in_s=60))
    auth = {"Authorization": f"Bearer {reader['token']}"}
    # Nobody followed: the changes' events were not built, only the story and the cluster's ring kept them.
    bbs.uow.history.add("web", ("crashed", time.time() - 5, 0, "cell-1", 1, "exited with status 1"))
    bbs.uow.cluster.add(time.time() - 4, "cordoned", "cell-2")
    bbs.hub.missed()
    # Then someone followed: what the stream built since is answered as it is, after the past.
    bbs.hub.publish([event("auction_completed", {"duration_s": 0.5})])

    body = (await http.get("/v1/events/recent", headers=auth)).json()
    items = body["items"]
    assert [(e["type"], e.get("source"), "id" in e) for e in items] == [
        ("actual_lrp_changed", "story", False), ("cell_changed", "cluster", False),
        ("auction_completed", None, True)], items
    assert items[0]["text"] == "web/0 crashed @cell-1 crash #1: exited with status 1"
    assert body["covered_since"] <= items[-1]["at"]
    only_cells = (await http.get("/v1/events/recent", params={"type": "cell_changed"}, headers=auth)).json()
    assert [e["text"] for e in only_cells["items"]] == ["cell-2 cordoned"]
    newest = (await http.get("/v1/events/recent", params={"limit": 1}, headers=auth)).json()["items"]
    assert [e["type"] for e in newest] == ["auction_completed"], "the stream's events come first when enough"
