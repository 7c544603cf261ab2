"""End to end, the dashboard in headless Chromium: `vendue dashboard` prints a login link, the browser logs in
with it (the token becomes a session cookie), the page renders the running cluster's cells grouped by
zone, and a push shows up on the same page, from the event stream, without a reload.

A screenshot of the page is kept in test-artifacts/ (VENDUE_TEST_ARTIFACTS moves it). HTTP transport only:
the page reads the BBS's own event stream, which is the same on either transport.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from deploy.cluster import PROJECT_ROOT

from .chromium import headless_chromium
from .conftest import E2ECluster, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

PAGE_TIMEOUT_S = 30.0


@pytest.mark.parametrize("transport", ["http"])
def test_the_dashboard_renders_the_cells_and_a_push_without_a_reload(make_cluster, tmp_path: Path) -> None:
    c: E2ECluster = make_cluster(cells=4, zones=2)
    too_long = c.cli("dashboard", "--expires", "2d")
    assert too_long.code == 2 and too_long.stderr.startswith("error: --expires: "), too_long.output
    assert len(too_long.stderr.splitlines()) == 1 and too_long.stdout == "", too_long.output
    result = c.cli("dashboard", "--json")
    assert result.code == 0, result.output
    url = json.loads(result.stdout)["url"]
    assert url.startswith(f"{c.lc.bbs_url}/ui/login?token=vdt_"), url
    cells = {cell["cell_id"]: cell["zone"] for cell in c.bbs.cells()}

    # The cluster's CA is not the browser's: it is told to accept the BBS's certificate as it is.
    with headless_chromium(tmp_path / "profile", "--ignore-certificate-errors") as browser:
        browser.open(url)

        def tiles() -> dict[str, str]:
            shown = browser.evaluate(
                "JSON.stringify([...document.querySelectorAll('#cells .zone')].flatMap((z) => "
                "[...z.querySelectorAll('.cell')].map((t) => [t.dataset.cellId, z.dataset.zone])))")
            return dict(json.loads(shown))

        def page_state() -> str:
            return browser.evaluate(
                "location.pathname + ' ' + document.getElementById('message')?.textContent "
                "+ ' ' + (document.getElementById('status')?.textContent)"
            )

        wait_for(lambda: expect(tiles() == cells, f"tiles {tiles()}; page {page_state()}"), PAGE_TIMEOUT_S,
                 f"the page showing the cells {cells} by zone")
        assert browser.evaluate("location.pathname + location.search") == "/ui", (
            "the token left the address bar"
        )
        wait_for(lambda: expect(browser.evaluate("document.getElementById('status').textContent") == "live",
                                page_state()), PAGE_TIMEOUT_S, "the page following the event stream")
        browser.evaluate("window.loadedOnce = 'yes'")  # a reload would lose it

        web = c.guid("web")
        c.bbs.desire(web, 3)
        wait_all_running(c.bbs, web, 3)

        def app_row() -> str:
            row = browser.evaluate(f"document.querySelector('#apps tr[data-app=\"{web}\"]')?.dataset.running")
            return expect(row == "3", f"running shown: {row!r}; page {page_state()}")

        wait_for(app_row, PAGE_TIMEOUT_S, f"the page showing {web} with 3 running")
        held = browser.evaluate("[...document.querySelectorAll('#cells .cell')]"
                                ".reduce((n, t) => n + Number(t.dataset.instances), 0)")
        assert held >= 3, f"expected the tiles to hold the 3 instances, they show {held}"
        assert browser.evaluate("window.loadedOnce") == "yes", "the page was reloaded"
        assert browser.evaluate("document.querySelectorAll('#events li').length") > 0, "no event listed"

        artifacts = Path(os.environ.get("VENDUE_TEST_ARTIFACTS", PROJECT_ROOT / "test-artifacts"))
        artifacts.mkdir(parents=True, exist_ok=True)
        browser.screenshot(artifacts / "dashboard.png")

    # The link was good for that one login: opened again (from a shell's history, say), it logs no one in.
    with httpx.Client(verify=c.lc.verify, follow_redirects=False, timeout=10) as stranger:
        again = stranger.get(url)
        assert again.status_code == 403 and "used already" in again.text, (again.status_code, again.text)
        assert "vendue_session" not in again.headers.get("set-cookie", ""), again.headers
