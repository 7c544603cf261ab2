"""The HTML report: self-contained, and its charts really render — checked in headless Chromium.

The screenshot (and the page) are kept in test-artifacts/ (git-ignored; VENDUE_TEST_ARTIFACTS moves it).
Chromium is Debian's `chromium` package, which .ci/run installs: without it the browser test is skipped
on a developer's machine and fails in CI (CI=true).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.e2e.chromium import chromium_binary

from ..cluster import PROJECT_ROOT
from .compare import compare
from .report import CHART_IDS, json_path, render_html, write_report
from .scenarios import SCENARIOS

# What each chart draws once plotly has run: a table's cell text, bars' points, a heatmap's image.
RENDERED_MARK = {"summary-table": "cell-text", "summary-bars": "point", "cell-allocation": "point",
                 "app-zones": "hm", "az-skew": "point", "wait-times": "point"}
BROWSER_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def report() -> dict:
    # dea-example: prefill (grey bars), two zones, several apps; two strategies side by side.
    return compare(SCENARIOS["dea-example"].build(0), ["dea", "diego"], description="report test")


def test_report_files_hold_every_number_and_the_page_needs_no_network(report: dict, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    data_path = write_report(report, page)
    assert data_path == json_path(page) == tmp_path / "r.json"
    assert json.loads(data_path.read_text()) == json.loads(json.dumps(report))
    text = page.read_text()
    assert re.findall(r"<(?:script|link)\b[^>]*\b(?:src|href)=[^>]*>", text) == []
    assert "Plotly.newPlot" in text and "r.json" in text
    for chart in CHART_IDS:
        assert text.count(f'id="{chart}"') == 1


def test_large_runs_are_aggregated_before_they_reach_the_page(report: dict) -> None:
    # 5,000 apps and 1,000 cells (numbers only: the page is built, not the placement)
    from .report import HEATMAP_APPS

    big = json.loads(json.dumps(report))
    zones = ["z0", "z1", "z2"]
    for s in big["strategies"]:
        s["per_cell"] = [
            {
                "cell_id": f"cell-{i}",
                "zone": zones[i % 3],
                "memory_mb": 65536,
                "allocated_mb": 50000,
                "prefill_mb": 0,
                "instances": 250,
            }
            for i in range(1000)
        ]
        s["app_zone_split"] = {f"app-{i}": {z: 17 for z in zones} for i in range(5000)}
    big["zones"] = zones
    text = render_html(big)
    assert len(text) < 10_000_000
    assert text.count("app-4999") == 0 and HEATMAP_APPS == 40  # the heatmap shows the largest 40 only


class _Charts(HTMLParser):
    """For each chart div: the classes of every element inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.classes: dict[str, set[str]] = {}
        self._open: list[tuple[str, str | None]] = []  # (tag, chart id it opened)
        self._inside: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        chart = attributes.get("id") if attributes.get("id") in CHART_IDS else None
        if chart:
            self._inside.append(chart)
            self.classes[chart] = set()
        for name in self._inside:
            self.classes[name].update((attributes.get("class") or "").split())
        if tag not in ("img", "br", "meta", "input", "link", "hr"):
            self._open.append((tag, chart))

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            opened, chart = self._open.pop()
            if chart:
                self._inside.remove(chart)
            if opened == tag:
                break


def _run_browser(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        out, err = b"", b"timed out"
    finally:  # the browser's helpers (its session) go too, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.e2e
@pytest.mark.timeout(4 * BROWSER_TIMEOUT_S)
def test_the_charts_render_in_headless_chromium(report: dict, tmp_path: Path) -> None:
    browser = chromium_binary()
    page = tmp_path / "report.html"
    write_report(report, page)
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
              "--virtual-time-budget=20000", "--window-size=1400,4200"]
    dumped = _run_browser([*common, "--dump-dom", page.as_uri()])
    dom = dumped.stdout.decode(errors="replace")
    assert "</html>" in dom, (
        f"no DOM from chromium (exit {dumped.returncode}): {dumped.stderr.decode()[-2000:]}"
    )

    artifacts = Path(os.environ.get("VENDUE_TEST_ARTIFACTS", PROJECT_ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    screenshot = artifacts / "simulate-report.png"
    screenshot.unlink(missing_ok=True)
    shot = _run_browser([*common, "--hide-scrollbars", f"--screenshot={screenshot}", page.as_uri()])
    shutil.copyfile(page, artifacts / "simulate-report.html")
    print(f"\nscreenshot: {screenshot}\nreport: {artifacts / 'simulate-report.html'}")

    charts = _Charts()
    charts.feed(dom)
    assert set(charts.classes) == set(CHART_IDS)
    for chart, classes in charts.classes.items():
        assert "main-svg" in classes, f"{chart}: plotly drew no SVG"
        assert RENDERED_MARK[chart] in classes, (
            f"{chart}: no {RENDERED_MARK[chart]!r} element: nothing plotted"
        )
    for strategy in ("dea", "diego"):  # the table's cells carry the strategies' names
        assert re.search(rf'class="cell-text"[^>]*>{strategy}<', dom)
    assert screenshot.is_file(), f"no screenshot (exit {shot.returncode}): {shot.stderr.decode()[-2000:]}"
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
