"""`vendue logs`: its flags checked before the BBS is asked (exit 2, one line), what an app printed shown
with its control sequences as escapes, `--json` lines with RFC 3339 UTC times. The BBS is a stand-in
client here: the real relay is tests/e2e/test_logs.py's."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import pytest
from typer.testing import CliRunner

from . import logs_cmd
from .bbs_client import BBSUnreachable, NotFound
from .cli import app
from .logs_cmd import as_json, follow_through_failures, render, since_ns

NOW = 1_764_392_400.0  # 2025-11-29T05:00:00Z
LINE = {"time": "2025-11-29T05:00:00.000000001Z", "ns": 1_764_392_400_000_000_001, "index": 2,
        "instance_guid": "g2", "cell": "cell-1", "stream": "stderr",
        "text": "boom \x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil"}


def test_since_takes_a_duration_ago_or_an_rfc3339_time() -> None:
    assert since_ns("10m", NOW) == int((NOW - 600) * 1e9)
    assert since_ns("30s", NOW) == int((NOW - 30) * 1e9)
    assert since_ns("2h", NOW) == int((NOW - 7200) * 1e9)
    assert since_ns("1d", NOW) == int((NOW - 86400) * 1e9)
    assert since_ns("2025-11-29T05:00:00Z", NOW) == int(NOW * 1e9)
    assert since_ns("2025-11-29T06:00:00+01:00", NOW) == int(NOW * 1e9)
    for bad in ("10 minutes", "yesterday", "-5m", "2025-11-29T05:00:00"):
        with pytest.raises(ValueError):
            since_ns(bad, NOW)


def test_a_line_on_the_terminal_shows_control_sequences_as_escapes() -> None:
    shown = render(LINE)
    at = datetime.fromtimestamp(LINE["ns"] / 1e9).astimezone().strftime("%H:%M:%S.%f")[:-3]
    assert shown == f"{at} [2@cell-1] ERR boom \\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil"
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in shown)
    task_line = render({"ns": 0, "task_guid": "t1", "cell": "c", "stream": "stdout", "text": "a\nb\rc"})
    assert task_line.endswith("[task@c] OUT a\\x0ab\\x0dc"), "newlines inside a line are shown, not obeyed"


def test_json_lines_keep_the_text_escaped_and_the_time_in_rfc3339_utc() -> None:
    encoded = as_json(LINE)
    assert not any(ord(c) < 0x20 or ord(c) >= 0x7F for c in encoded), "every control escaped by the encoder"
    assert json.loads(encoded) == LINE
    assert json.loads(as_json({"ns": 1_764_392_400_000_000_001, "text": "x"}))["time"] == (
        "2025-11-29T05:00:00.000000001Z")


@pytest.mark.parametrize(("argv", "says"), [
    (["logs"], "name an APP, or --task GUID"),
    (["logs", "web", "--task", "t1"], "name an APP, or --task GUID"),
    (["logs", "--task", "t1", "3"], "name an APP"),
    (["logs", "web", "--recent", "-1"], "--recent: must be between 0 and 100000"),
    (["logs", "web", "--since", "yesterday"], "--since: 'yesterday' is neither a duration"),
    (["logs", "web", "--stderr", "--stdout"], "--stderr, --stdout: choose one"),
])
def test_bad_flags_exit_2_with_one_line_before_asking_the_bbs(
    argv: list[str], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs_cmd, "connect", lambda connection: pytest.fail("the BBS was asked"))
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert says in result.output and len(result.output.strip().splitlines()) == 1, result.output


class FakeClient:
    def __init__(self, lines: list[dict[str, Any]], missing: bool = False) -> None:
        self.lines, self.missing = lines, missing
        self.asked: list[tuple[str, dict[str, str], bool]] = []

    def logs(self, path: str, params: Mapping[str, str], follow: bool) -> Iterator[dict[str, Any]]:
        self.asked.append((path, dict(params), follow))
        if self.missing:
            raise NotFound("not found", 404)
        yield from self.lines
        if follow:  # a follow ends only when its reader stops it
            raise KeyboardInterrupt


def run(monkeypatch: pytest.MonkeyPatch, client: FakeClient, argv: list[str]) -> Any:
    @contextlib.contextmanager
    def connect(connection: object) -> Iterator[FakeClient]:
        yield client

    monkeypatch.setattr(logs_cmd, "connect", connect)
    return CliRunner().invoke(app, argv)


def test_the_query_follows_the_flags_and_each_line_is_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient([LINE, {**LINE, "text": "fine", "stream": "stdout"}])
    result = run(monkeypatch, client, ["logs", "web", "2", "-f", "--recent", "5", "--stderr"])
    assert result.exit_code == 0, result.output
    assert client.asked == [("/v1/logs/web", {"recent": "5", "index": "2", "stream": "stderr",
                                              "follow": "1"}, True)]
    out = result.stdout.splitlines()
    assert len(out) == 2 and "\x1b" not in result.stdout and out[1].endswith("[2@cell-1] OUT fine")
    result = run(monkeypatch, client, ["logs", "--task", "t1", "--json"])
    assert client.asked[-1] == ("/v1/tasks/t1/logs", {}, False)
    assert [json.loads(line) for line in result.stdout.splitlines()][0] == LINE


def test_a_dropped_stream_and_an_unknown_app_fail_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    result = run(monkeypatch, FakeClient([LINE, {"end": "dropped: the reader fell behind"}]), ["logs", "web"])
    assert result.exit_code == 1 and "dropped: the reader fell behind" in result.output
    result = run(monkeypatch, FakeClient([], missing=True), ["logs", "nope"])
    assert result.exit_code == 1 and "no app named 'nope'" in result.output, result.output


class BreakingClient:
    """Its first stream breaks after two lines; the next one answers what it is asked for."""

    def __init__(self) -> None:
        self.asked: list[dict[str, str]] = []

    def logs(self, path: str, params: Mapping[str, str], follow: bool) -> Iterator[dict[str, Any]]:
        self.asked.append(dict(params))
        if len(self.asked) == 1:
            yield {**LINE, "ns": 10, "text": "one"}
            yield {**LINE, "ns": 20, "text": "two"}
            raise BBSUnreachable("lost the log stream")
        if len(self.asked) == 2:
            yield {**LINE, "ns": 30, "text": "three"}
        raise BBSUnreachable("gone for good")


def test_a_broken_follow_resumes_after_the_last_line_and_gives_up_in_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logs_cmd.time, "sleep", lambda s: None)
    client = BreakingClient()
    lines = follow_through_failures(client, "/v1/logs/web", {"follow": "1"}, True, give_up_s=0.3)
    texts = []
    with pytest.raises(BBSUnreachable, match="gave up"):
        for line in lines:
            texts.append(line["text"])
    assert texts == ["one", "two", "three"], "nothing shown twice"
    assert client.asked[1] == {"follow": "1", "since": "20", "recent": "100000"}
    with pytest.raises(BBSUnreachable, match="lost the log stream"):
        list(follow_through_failures(BreakingClient(), "/v1/logs/web", {}, False))
