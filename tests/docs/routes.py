"""The HTTP routes of the BBS, the auctioneer and the rep, with who may call each: read from the apps
themselves (the routes they register) and their authorization tables (`policy.py`), and written
as the tables of docs/wire-protocol.md.

`python -m tests.docs.routes --write` rewrites the tables in the doc; routes_test.py fails when the doc's
tables are not what this module generates, so a route added to an app, or a row changed in a table,
cannot go undocumented.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from starlette.routing import Route, WebSocketRoute

from common.auth import Policy, Rule
from tests.security.apps import auctioneer_app, bbs_app, rep_app

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-protocol.md"


@dataclass(frozen=True, slots=True)
class Service:
    name: str  # the marker in the doc: <!-- routes:NAME --> ... <!-- /routes:NAME -->
    app: Callable[[], FastAPI]
    policy: Callable[[], Policy]


def _bbs_policy() -> Policy:
    from bbs.policy import POLICY

    return POLICY


def _auctioneer_policy() -> Policy:
    from auctioneer.policy import POLICY

    return POLICY


def _rep_policy() -> Policy:
    from rep.policy import POLICY

    return POLICY


SERVICES = (
    Service("bbs", bbs_app, _bbs_policy),
    Service("auctioneer", auctioneer_app, _auctioneer_policy),
    Service("rep", rep_app, _rep_policy),
)


@dataclass(frozen=True, slots=True)
class RouteRow:
    method: str
    path: str
    callers: str


def callers(rule: Rule | None) -> str:
    if rule is None:
        return "nobody (no row in the table)"
    if rule.public:
        return "anyone, no identity needed"
    roles = ", ".join(sorted(rule.roles))
    return f"{roles}: {rule.why}" if rule.why else roles


def route_rows(service: Service) -> list[RouteRow]:
    """One row per (method, path) the app serves, in the order the app registers them (HEAD left out:
    GET's row covers it)."""
    app, policy = service.app(), service.policy()
    return [
        RouteRow(method if isinstance(route, Route) else "GET (WebSocket)", route.path,
                 callers(policy.rule(method, route.path)))
        for route in app.router.routes
        if isinstance(route, Route | WebSocketRoute)
        for method in (sorted(route.methods or ()) if isinstance(route, Route) else ["GET"])
        if method != "HEAD"
    ]


def table(rows: list[RouteRow]) -> str:
    lines = ["| method | path | who may call |", "|---|---|---|"]
    lines += [f"| {row.method} | `{row.path}` | {row.callers} |" for row in rows]
    return "\n".join(lines) + "\n"


def _marked(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- routes:{name} -->\n)(.*?)(<!-- /routes:{name} -->)", re.S)


def documented_table(doc: str, name: str) -> str | None:
    found = _marked(name).search(doc)
    return found.group(2) if found else None


def rewrite(doc: str) -> str:
    for service in SERVICES:
        if documented_table(doc, service.name) is None:
            raise SystemExit(
                f"error: {DOC}: no <!-- routes:{service.name} --> ... <!-- /routes:{service.name} -->"
            )
        generated = table(route_rows(service))
        doc = _marked(service.name).sub(lambda m, text=generated: m.group(1) + text + m.group(3), doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the tables in {DOC.name}")
    args = parser.parse_args(argv)
    if args.write:
        DOC.write_text(rewrite(DOC.read_text()))
    else:
        sys.stdout.write("\n".join(table(route_rows(s)) for s in SERVICES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
