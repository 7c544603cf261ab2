"""`vendue tokens create|list|revoke` against a real `vendue bbs` process (client_cmd_test.py's: HTTPS, the
CLI acting as its admin; the tokens are checked at POST /v1/tokens/verify as a component, the BBS itself)."""

from __future__ import annotations

import json
import time
from datetime import datetime

import httpx
import pytest

from common.tls import TLSFiles, client_context

from .tokens_cmd import parse_duration

pytestmark = pytest.mark.timeout(120)


def listed(bbs) -> list[dict]:
    result = bbs.vendue("tokens", "list", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def verify(bbs, token: str) -> httpx.Response:
    """Whom a token stands for, asked as a component may (the BBS's own certificate)."""
    return httpx.post(f"{bbs.url}/v1/tokens/verify", json={"token": token},
                      verify=client_context(TLSFiles.in_dir(bbs.pki, "bbs")))


def test_create_prints_the_token_once_and_it_stands_for_its_role(bbs) -> None:
    created = bbs.vendue("tokens", "create", "--role", "reader", "--name", "ci", "--expires", "12h", "--json")
    assert created.exit_code == 0, created.output
    body = json.loads(created.stdout)
    assert set(body) == {"token", "id", "role", "name", "expires_at"}
    assert body["token"].startswith("vdt_") and (body["role"], body["name"]) == ("reader", "ci")
    assert body["expires_at"].endswith("Z")  # RFC 3339 UTC, as every time in the CLI's JSON
    assert abs(datetime.fromisoformat(body["expires_at"]).timestamp() - (time.time() + 12 * 3600)) < 60
    verified = verify(bbs, body["token"]).json()
    assert verified == {"role": "reader", "name": "ci", "id": body["id"]}

    plain = bbs.vendue("tokens", "create", "--role", "admin")
    assert plain.exit_code == 0, plain.output
    [token] = plain.stdout.splitlines()  # the token alone on stdout, for scripts; the note on stderr
    assert token.startswith("vdt_") and "shown once" in plain.stderr

    everything = bbs.vendue("tokens", "list", "--json").stdout + bbs.vendue("tokens", "list").stdout
    assert body["token"] not in everything and token not in everything
    assert body["id"] in {t["id"] for t in listed(bbs)}


def test_a_token_expires_in_90_days_unless_never_is_said(bbs) -> None:
    default = json.loads(bbs.vendue("tokens", "create", "--role", "reader", "-o", "json").stdout)
    in_90_days = time.time() + 90 * 86400
    assert abs(datetime.fromisoformat(default["expires_at"]).timestamp() - in_90_days) < 60, default
    never = bbs.vendue("tokens", "create", "--role", "reader", "--expires", "never", "--json")
    assert never.exit_code == 0, never.output
    assert json.loads(never.stdout)["expires_at"] is None
    told = bbs.vendue("tokens", "create", "--role", "reader")
    assert "expires never" not in told.stderr and "expires 20" in told.stderr, told.stderr
    as_yaml = bbs.vendue("tokens", "list", "-o", "yaml")
    assert as_yaml.exit_code == 0 and f"id: {default['id']}" in as_yaml.stdout, as_yaml.stdout


def test_revoke_marks_it_revoked_and_verification_fails(bbs) -> None:
    body = json.loads(bbs.vendue("tokens", "create", "--role", "reader", "--json").stdout)
    revoked = bbs.vendue("tokens", "revoke", body["id"])
    assert (revoked.exit_code, revoked.stdout.strip()) == (0, f"revoked {body['id']}")
    assert {t["id"]: t["revoked"] for t in listed(bbs)}[body["id"]] is True
    assert verify(bbs, body["token"]).status_code == 404
    table = bbs.vendue("tokens", "list")
    assert table.exit_code == 0 and body["id"] in table.stdout and "revoked" in table.stdout
    unknown = bbs.vendue("tokens", "revoke", "nosuchtoken")
    assert unknown.exit_code == 1 and unknown.stderr.splitlines() == ["error: no token with id 'nosuchtoken'"]


@pytest.mark.parametrize(("args", "field"), [
    (["--role", "rep"], "role"),
    (["--role", "auctioneer"], "role"),
    ([], "--role"),
    (["--role", "reader", "--expires", "soon"], "--expires"),
    (["--role", "reader", "--expires", "0"], "expires_in_s"),
    (["--role", "reader", "--expires", "4000d"], "expires_in_s"),
    (["--role", "reader", "--name", "n" * 200], "name"),
])
def test_bad_input_is_one_line_naming_the_field_exit_2_and_nothing_created(
    bbs, args: list[str], field: str
) -> None:
    before = listed(bbs)
    result = bbs.vendue("tokens", "create", *args)
    assert result.exit_code == 2, f"expected exit 2 for {args}, saw {result.exit_code}: {result.output}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and field in lines[0], lines
    assert result.stdout == "" and listed(bbs) == before


def test_durations() -> None:
    assert [parse_duration(d) for d in ("90", "90s", "15m", "12h", "30d", "1.5h")] == [
        90, 90, 900, 43200, 30 * 86400, 5400]
    for bad in ("", "h", "12 hours", "-1h", "1w"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)
