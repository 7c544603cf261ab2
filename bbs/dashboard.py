"""The dashboard: one self-contained page served by the BBS at /ui (bbs/static/dashboard.html: inline
script and style, nothing fetched from anywhere but this BBS), kept live by the event stream.

A browser has no client certificate. `vendue dashboard` (an admin) makes a short-lived login token and
prints `<bbs>/ui/login?token=...`; GET /ui/login exchanges it, once, for a session — a reader token of its
own, SESSION_S long, in an HttpOnly, Secure, SameSite=Strict cookie — and sends the browser on to /ui, so
the token leaves the address bar and the history. A login token is good for that one exchange and
nothing else (not as a bearer token): a link seen in a shell's history, a log or over a shoulder after it
was opened logs no one in. Expired and used logins and sessions are deleted at each login. The
authorization middleware takes that cookie as a bearer token for GET and HEAD only (common/auth.py): the
page only reads (GET /v1/cells, desired and actual LRPs, the EventSource of /v1/events, which cannot send
a header), and no request that writes can be authorized by a cookie the browser attaches on another
site's behalf (CSRF). A reader session also sees no env values (bbs/redact.py).
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from .core import BBS

SESSION_COOKIE = "vendue_session"
SESSION_S = 8 * 3600.0  # a working day; `vendue dashboard` again for another
# The page runs its own inline script and style and talks to this BBS only; nothing else is allowed.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                           "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'")
PAGE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                "Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff"}
LOGIN_HELP = ("<!doctype html><title>Vendue</title><p>The dashboard needs a login link: run "
              "<code>vendue dashboard</code> (as the cluster's admin) and open the URL it prints.</p>")
LOGIN_REFUSED = ("<!doctype html><title>Vendue</title><p>This login link is not valid (used already, "
                 "expired, revoked or unknown): run <code>vendue dashboard</code> again.</p>")


LOGIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    303: {"description": "Logged in: the session cookie is set, on to /ui"},
    403: {"description": "The login token is not valid", "content": {"text/html": {}}},
}


def dashboard_page() -> str:
    return resources.files("bbs").joinpath("static/dashboard.html").read_text(encoding="utf-8")


def add_dashboard(app: FastAPI, bbs: BBS) -> None:
    """GET /ui (reader or admin: bbs/policy.py) and GET /ui/login (public: it checks the token itself)."""
    page = dashboard_page()

    @app.get("/ui", response_class=HTMLResponse)
    async def dashboard() -> HTMLResponse:
        """The dashboard page."""
        return HTMLResponse(page, headers=PAGE_HEADERS)

    @app.get("/ui/login", response_class=HTMLResponse, responses=LOGIN_RESPONSES)
    async def login(token: Annotated[str | None, Query(max_length=256)] = None) -> Response:
        """A login token (`vendue dashboard`'s), used up -> a session cookie, and on to /ui. Without a
        token: how to get one. A token that is not a valid, unused login token: 403 (the caller, whoever
        it is, may not log in with it)."""
        if not token:
            return HTMLResponse(LOGIN_HELP, headers=PAGE_HEADERS)
        session = await bbs.tokens.log_in(token, SESSION_S)
        if session is None:
            return HTMLResponse(LOGIN_REFUSED, status_code=403, headers=PAGE_HEADERS)
        response = RedirectResponse("/ui", status_code=303, headers=PAGE_HEADERS)
        response.set_cookie(SESSION_COOKIE, session, max_age=int(SESSION_S), path="/", secure=True,
                            httponly=True, samesite="strict")
        return response
