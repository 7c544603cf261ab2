"""Schemathesis against the BBS's and the auctioneer's OpenAPI: a real `vendue bbs` and a real
`vendue auctioneer` (with that BBS) serve HTTPS on loopback, and each generated request is made with a
certificate of a role the service's authorization table lets call that route (admin wherever admin may;
else the component that calls it: a rep for heartbeats and reports, the auctioneer for placement failures
and its lease, the BBS for start requests), so that every body is parsed, not refused at the door.
Both positive and negative examples; every answer must be no 5xx and match its documented schema.

The schemas come from the apps themselves (the auctioneer serves none). A bounded number of examples per
operation keeps each API well under a minute. GET /v1/events is left out: it is a stream that never ends
(tests/security/test_limits_process.py and tests/bbs/ cover it).
"""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings

from auctioneer.policy import POLICY as AUCTIONEER_POLICY
from bbs.policy import POLICY as BBS_POLICY
from common.auth import Policy
from common.procutil import child_preexec, terminate_then_kill, wait_ready_file
from common.tls import TLSFiles, init_ca, issue
from tests.security.apps import auctioneer_app, bbs_app
from tests.support.bbs_process import BBSProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(
    os.environ.get("VENDUE_SCHEMATHESIS_EXAMPLES", "15")
)  # per operation (hypothesis' max_examples)
# The role each certificate states; the rep speaks for every cell (one prefix per first character of a guid).
CALLERS = {"admin": "admin", "reader": "viewer", "bbs": "bbs", "auctioneer": "auctioneer", "rep": "rep-all"}
PREFERENCE = ("admin", "reader", "rep", "auctioneer", "bbs")  # whom to call a route as, among those allowed
Sessions = dict[str, tuple[requests.Session, dict]]
CHECKS = [schemathesis.checks.not_a_server_error, schemathesis.checks.response_schema_conformance]


BBS_SCHEMA = schemathesis.openapi.from_dict(bbs_app().openapi()).exclude(path="/v1/events")
AUCTIONEER_SCHEMA = schemathesis.openapi.from_dict(auctioneer_app().openapi())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster CA in <data_dir>/certs, where BBSProcess looks for it, with every caller's certificate."""
    data_dir = tmp_path_factory.mktemp("cluster")
    certs = data_dir / "certs"
    init_ca(certs)
    for role, name in CALLERS.items():
        issue(certs, role=role, name=name,
              cell_prefixes=list(string.ascii_letters + string.digits) if role == "rep" else ())
    return certs


@pytest.fixture(scope="module")
def sessions(pki: Path) -> Iterator[dict[str, tuple[requests.Session, dict]]]:
    """A keep-alive session per role, and what each request sends with it: the role's certificate, and
    trust in the cluster CA only (schemathesis passes its own `verify`, so these go with each call)."""
    made = {
        role: (
            requests.Session(),
            {
                "cert": (str(TLSFiles.in_dir(pki, name).cert), str(TLSFiles.in_dir(pki, name).key)),
                "verify": str(pki / "ca.pem"),
            },
        )
        for role, name in CALLERS.items()
    }
    try:
        yield made
    finally:
        for session, _ in made.values():
            session.close()


@pytest.fixture(scope="module")
def bbs(pki: Path) -> Iterator[BBSProcess]:
    # A fuzzed image reference makes the BBS ask a registry that is not there: let it give up quickly.
    process = BBSProcess(pki.parent, "schemathesis", None, "--registry-timeout", "0.5")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def auctioneer(pki: Path, bbs: BBSProcess) -> Iterator[str]:
    files = TLSFiles.in_dir(pki, "auctioneer")
    ready = pki.parent / "auctioneer.ready"
    log = (pki.parent / "auctioneer.log").open("wb")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENDUE_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deploy.cli",
            "auctioneer",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            "--bbs-url",
            bbs.url,
            "--tls-cert",
            str(files.cert),
            "--tls-key",
            str(files.key),
            "--tls-ca",
            str(files.ca),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=log,
        preexec_fn=child_preexec(),
    )
    try:
        yield str(wait_ready_file(ready, timeout_s=60, proc=proc)["url"])
    finally:
        terminate_then_kill(proc, grace_s=10)
        log.close()


def caller(policy: Policy, case: schemathesis.Case) -> str:
    """The role to make this request as: the first in PREFERENCE the operation's row names (the
    documented method's row: a negative example may send another method)."""
    operation = case.operation
    row = policy.rule(operation.method.upper(), operation.path)
    assert row is not None, f"{operation.method} {operation.path} has no row in the authorization table"
    return "admin" if row.public else next(role for role in PREFERENCE if role in row.roles)


def call_and_check(case: schemathesis.Case, policy: Policy, url: str, sessions: Sessions) -> None:
    session, tls = sessions[caller(policy, case)]
    response = case.call(base_url=url, session=session, timeout=30, **tls)
    assert response.status_code != 401, (
        f"{case.method} {case.path} was not authenticated: {response.text[:200]}"
    )
    case.validate_response(response, checks=CHECKS)


@BBS_SCHEMA.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_bbs_api_never_fails_and_answers_as_documented(case: schemathesis.Case, bbs: BBSProcess,
                                                             sessions: Sessions) -> None:
    call_and_check(case, BBS_POLICY, bbs.url, sessions)


@AUCTIONEER_SCHEMA.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_auctioneer_api_never_fails_and_answers_as_documented(case: schemathesis.Case, auctioneer: str,
                                                                    sessions: Sessions) -> None:
    call_and_check(case, AUCTIONEER_POLICY, auctioneer, sessions)


def test_the_schemas_list_every_route_but_the_stream() -> None:
    """A route missing from a schema would go unfuzzed: the schemas hold every row of the tables, but for
    WebSocket routes (`vendue exec`), which OpenAPI cannot describe (tests/e2e/test_exec.py drives them)."""
    from starlette.routing import WebSocketRoute

    for app, policy in ((bbs_app(), BBS_POLICY), (auctioneer_app(), AUCTIONEER_POLICY)):
        schema = app.openapi()
        documented = {(method.upper(), path) for path, ops in schema["paths"].items() for method in ops}
        documented |= {("GET", route.path) for route in app.routes if isinstance(route, WebSocketRoute)}
        undocumented = {row for row, rule in policy.rows.items() if row not in documented}
        assert undocumented <= {("GET", "/openapi.json"), ("GET", "/docs")}, json.dumps(sorted(undocumented))
