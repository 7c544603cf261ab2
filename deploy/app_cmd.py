"""`vendue app NAME`: an app's story, as `kubectl describe` tells a pod's (deploy/app_story.py).

Asks the BBS (any reader) for the app's definition, its instances, its latest rollout and its last events
(GET /v1/desired_lrps/{guid}/events, kept per app by the BBS: docs/events.md), and prints its status,
each instance's state, cell, uptime, crashes, last crash reason and next restart (a crash loop named as
such, with its back-off), the placement error if any, and its events, newest first, within 80 columns.
`--json` prints the same view (RFC 3339 UTC times, durations in seconds). Exit status: 0; 1 the BBS is
unreachable or there is no such app; 2 bad input.
"""

from __future__ import annotations

import sys
import time
from typing import Annotated

import typer

from .bbs_client import NotFound
from .cli import app
from .client_cmd import AsJson, Connection, OneLineErrorsCommand, bbs_command, connect, fail, print_json


@app.command(name="app", cls=OneLineErrorsCommand)
@bbs_command
def app_story(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The app's process guid.", show_default=False)],
    connection: Connection = Connection(),
    as_json: AsJson = False,
) -> None:
    """An app's story: definition, version and rollout, every instance (state, cell, uptime, crashes, next
    restart), the placement error, and its last events."""
    from .app_story import assemble, render

    with connect(connection) as client:
        try:
            desired = client.desired_lrp(name).model_dump(mode="json")
        except NotFound:
            fail(f"no app named {name!r}")
        actuals = [a.model_dump(mode="json") for a in client.actual_lrps(name)]
        rollout = client.get_rollout(name)
        try:
            events = client.app_events(name)
        except NotFound:
            fail(f"no app named {name!r}")  # removed meanwhile
    story = assemble(desired, actuals, rollout, events, time.time())
    if as_json:
        print_json(story)
        return
    sys.stdout.write("\n".join(render(story)) + "\n")
