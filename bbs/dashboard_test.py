"""The dashboard's page and its login: a token in the URL becomes a reader session in a cookie, good for
reads only. In process (the BBS app over ASGI, authorization on); the page in a browser against a real
cluster is tests/e2e/test_dashboard.py."""

from __future__ import annotations

import asyncio
import re
import time

import httpx

from bbs.api import create_app
from bbs.dashboard import SESSION_COOKIE, SESSION_S, dashboard_page
from common.models import TokenCreate
from tests.support.polling import eventually


async def test_a_login_token_becomes_a_reader_session_cookie_for_reads_only(bbs_http) -> None:
    bbs, http = bbs_http
    assert (await http.get("/ui")).status_code == 401  # no identity: no page
    assert "vendue dashboard" in (await http.get("/ui/login")).text
    refused = await http.get("/ui/login", params={"token": "vdt_unknown"})
    assert refused.status_code == 403 and "not valid" in refused.text
    assert SESSION_COOKIE not in http.cookies

    api_token = await bbs.tokens.create(TokenCreate(role="reader", name="a script", expires_in_s=60))
    refused = await http.get("/ui/login", params={"token": api_token["token"]})
    assert refused.status_code == 403, "only a login token logs in"
    login = await bbs.tokens.create(
        TokenCreate(role="reader", name="dashboard login", expires_in_s=60, purpose="login"))
    as_bearer = await http.get("/v1/cells", headers={"Authorization": f"Bearer {login['token']}"})
    assert as_bearer.status_code == 401, "a login token is not a bearer token"
    response = await http.get("/ui/login", params={"token": login["token"]})
    assert response.status_code == 303 and response.headers["location"] == "/ui", response.text
    cookie = response.headers["set-cookie"]
    for attribute in ("HttpOnly", "Secure", "SameSite=strict", "Path=/", f"Max-Age={int(SESSION_S)}"):
        assert attribute.lower() in cookie.lower(), cookie
    session = http.cookies[SESSION_COOKIE]
    assert session != login["token"]  # a session of its own: the login token stays short-lived

    page = await http.get("/ui")
    assert page.status_code == 200 and page.text == dashboard_page()
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert (await http.get("/v1/cells")).status_code == 200
    assert (await http.get("/v1/tokens")).status_code == 403  # admin only: the session is a reader's
    write = await http.post("/v1/desired_lrps", json={"process_guid": "web", "instances": 1,
                                                      "command": ["true"]})
    assert write.status_code == 401, write.text  # a cookie never authorizes a write (CSRF)
    assert (await http.get("/v1/desired_lrps")).json()["items"] == []

    tokens = {t["name"]: t for t in await bbs.tokens.list_all()}
    assert tokens["dashboard session of dashboard login"]["role"] == "reader"
    assert tokens["dashboard session of dashboard login"]["purpose"] == "session"
    assert "dashboard login" not in tokens, "the login token, used, is gone"

    transport = httpx.ASGITransport(app=create_app(bbs, insecure=False))
    async with httpx.AsyncClient(transport=transport, base_url="https://bbs") as another_browser:
        again = await another_browser.get("/ui/login", params={"token": login["token"]})
        assert again.status_code == 403 and "used already" in again.text
        assert SESSION_COOKIE not in another_browser.cookies


async def test_a_login_link_opened_twice_at_once_logs_in_once(bbs_http) -> None:
    bbs, http = bbs_http
    login = await bbs.tokens.create(TokenCreate(role="reader", name="link", expires_in_s=60, purpose="login"))
    opening = (http.get("/ui/login", params={"token": login["token"]}) for _ in range(5))
    answers = await asyncio.gather(*opening)
    assert sorted(a.status_code for a in answers) == [303, 403, 403, 403, 403]
    sessions = [t for t in await bbs.tokens.list_all() if t["purpose"] == "session"]
    assert len(sessions) == 1, sessions


async def test_each_login_deletes_the_logins_and_sessions_that_can_never_be_used_again(bbs_http) -> None:
    bbs, http = bbs_http
    expired = await bbs.tokens.create(TokenCreate(role="reader", name="old link", expires_in_s=0.01,
                                                 purpose="login"))
    revoked = await bbs.tokens.create(TokenCreate(role="reader", name="revoked link", purpose="login"))
    await bbs.tokens.revoke(revoked["id"])
    script = await bbs.tokens.create(TokenCreate(role="reader", name="a script", expires_in_s=0.01))
    unused = await bbs.tokens.create(TokenCreate(role="reader", name="unused link", purpose="login"))
    login = await bbs.tokens.create(TokenCreate(role="reader", name="link", purpose="login"))
    last_expiry = max(expired["expires_at"], script["expires_at"])
    await eventually(lambda: time.time() > last_expiry, 5.0, "the two 10 ms tokens expired")
    assert (await http.get("/ui/login", params={"token": login["token"]})).status_code == 303
    kept = {t["id"] for t in await bbs.tokens.list_all()}
    assert expired["id"] not in kept and revoked["id"] not in kept and login["id"] not in kept
    assert {script["id"], unused["id"]} <= kept, "an API token is listed until revoked; a login until used"


def test_the_page_is_self_contained() -> None:
    page = dashboard_page()
    assert "<script>" in page and "<style>" in page
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page), "the page loads another file"
    assert not re.search(r"https?://", page), "the page names another site"


def test_the_page_never_parses_text_as_html() -> None:
    """Whatever an app or a cell said (a crash reason, a task's result) goes in as text nodes: the page has
    no way of making markup from a string (tests/e2e/test_dashboard.py shows a result holding an <img>)."""
    page = dashboard_page()
    for sink in (r"\.innerHTML\s*=", r"\.outerHTML\s*=", r"insertAdjacentHTML", r"document\.write",
                 r"createContextualFragment", r"DOMParser", r"\beval\(", r"new Function"):
        assert not re.search(sink, page), f"the page uses {sink}"
