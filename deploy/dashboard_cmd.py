"""`vendue dashboard [--open]`: the URL of the BBS's live dashboard (/ui), with a login token in it.

As the cluster's admin (found as every client command finds it), it asks the BBS for a login token that
expires soon (`--expires`, 10 minutes by default) and prints `<bbs>/ui/login?token=...`: opening it
exchanges the token for a browser session (bbs/dashboard.py), as a notebook server's login link does.
The token is good for that one login and for nothing else, so the link is a secret until it is opened or
expires: it is printed, never put in an argv (`--open` hands it to the browser through Python's
webbrowser module, which does put it in the browser's argv, for the moment the browser takes to open it).
"""

from __future__ import annotations

import webbrowser
from typing import Annotated

import typer

from common.models import TokenCreate

from .cli import app
from .client_cmd import (
    USAGE_ERROR,
    AsJson,
    Connection,
    OneLineErrorsCommand,
    bbs_command,
    connect,
    fail,
    print_json,
)
from .terminal_text import echo
from .tokens_cmd import parse_duration

LOGIN_TOKEN_NAME = "dashboard login"
DEFAULT_EXPIRES = "10m"


@app.command(cls=OneLineErrorsCommand)
@bbs_command
def dashboard(
    open_browser: Annotated[bool, typer.Option("--open", help="Open it in the default browser too.")] = False,
    expires: Annotated[
        str,
        typer.Option(
            "--expires",
            metavar="DURATION",
            help="How long the link may be used to log in: 10m, 1h, or seconds.",
        ),
    ] = DEFAULT_EXPIRES,
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """Print the live dashboard's URL (served by the BBS at /ui) with a short-lived login token."""
    try:
        expires_in_s = parse_duration(expires)
    except ValueError as exc:
        fail(f"--expires: {exc}", USAGE_ERROR)
    if not 0 < expires_in_s <= 86400:
        fail(
            f"--expires: expected at most a day (the login link is a secret while it lasts), got {expires!r}",
            USAGE_ERROR,
        )
    with connect(connection) as client:
        created = client.create_token(
            TokenCreate(role="reader", name=LOGIN_TOKEN_NAME, expires_in_s=expires_in_s, purpose="login")
        )
        base = client.current_url()
    url = f"{base}/ui/login?token={created.token}"
    if as_json:
        print_json({"url": url, "token_id": created.id, "expires_at": created.expires_at})
    else:
        echo(url)
        echo(f"login link good for one login within {expires}: open it to get a reader session of "
             f"8 hours (revoke it unused with `vendue tokens revoke {created.id}`)", err=True)
    if open_browser and not webbrowser.open(url):
        fail("--open: no browser found here; open the URL above yourself")

