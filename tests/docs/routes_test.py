"""docs/wire-protocol.md lists every route the BBS, the auctioneer and the rep serve, with who may call it,
as their apps and authorization tables say (tests/docs/routes.py generates the tables)."""

from __future__ import annotations

from tests.docs.routes import DOC, SERVICES, documented_table, route_rows, table


def test_the_doc_lists_every_route_each_app_serves_with_its_callers() -> None:
    doc = DOC.read_text()
    for service in SERVICES:
        rows = route_rows(service)
        assert rows, f"{service.name}: the app registers no route"
        documented = documented_table(doc, service.name)
        assert documented is not None, f"{DOC.name}: no routes table for {service.name}"
        generated = table(rows)
        missing = [line for line in generated.splitlines() if line not in documented.splitlines()]
        stale = [line for line in documented.splitlines() if line not in generated.splitlines()]
        assert (missing, stale) == ([], []), (
            f"{DOC.name}, {service.name}: rows the app serves but the doc lacks {missing}, rows the doc has "
            "but"
            f" the app does not serve {stale}; run `python -m tests.docs.routes --write`"
        )

