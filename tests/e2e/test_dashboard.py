"""End to end, the dashboard in headless Chromium on one real cluster (BBS, auctioneer and reps as processes,
TLS on) shared by the module's tests: `vendue dashboard` prints a login link, the browser logs in with it
(the token becomes a session cookie), and each page shows what the API says:

- the overview: the cells grouped by zone, a push without a reload, a failed task's reason and result in
  the tasks panel (as text: a result holding markup runs nothing);
- an app's page: the placement error of an app too big for any cell, the crash reason and next restart of
  an app that exits at once, its recent events;
- a cell's page: the instances the cell runs;
- events from before the page opened, and sparklines of auction and convergence durations with points.

Screenshots of the pages are kept in test-artifacts/ (VENDUE_TEST_ARTIFACTS moves it). HTTP transport only:
the page reads the BBS's own event stream, which is the same on either transport.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.cluster import PROJECT_ROOT

from .chromium import DevTools, headless_chromium
from .conftest import APP_COMMAND, E2ECluster, expect, wait_all_running, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300),
              pytest.mark.parametrize("module_cluster", ["http"], indirect=True)]

CLUSTER = {"cells": 4, "zones": 2}
PAGE_TIMEOUT_S = 30.0
XSS = "<img src=x onerror=window.xssRan=1>"


@dataclass
class Dashboard:
    c: E2ECluster
    browser: DevTools
    login_url: str

    def js(self, expression: str) -> Any:
        return self.browser.evaluate(expression)

    def go(self, fragment: str) -> None:
        self.js(f"location.hash = {json.dumps(fragment)}")

    def texts(self, selector: str) -> list[str]:
        found = f"document.querySelectorAll({json.dumps(selector)})"
        return list(self.js(f"[...{found}].map((e) => e.textContent)"))

    def page_state(self) -> str:
        return str(self.js("location.hash + ' | ' + document.getElementById('message')?.textContent + ' | ' "
                           "+ document.getElementById('status')?.textContent + ' | recent: ' "
                           "+ document.body?.dataset.recent + ' | listed: ' + document.body?.dataset.listed"))

    def until(self, check: Callable[[], Any], what: str) -> Any:
        return wait_for(check, PAGE_TIMEOUT_S, what)

    def screenshot(self, name: str) -> None:
        artifacts = Path(os.environ.get("VENDUE_TEST_ARTIFACTS", PROJECT_ROOT / "test-artifacts"))
        artifacts.mkdir(parents=True, exist_ok=True)
        self.browser.screenshot(artifacts / name)


@pytest.fixture(scope="module")
def dashboard(module_cluster: E2ECluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """The module's cluster with one browser logged in to its dashboard (the page open, following)."""
    c = module_cluster
    result = c.cli("dashboard", "--json")
    assert result.code == 0, result.output
    url = json.loads(result.stdout)["url"]
    assert url.startswith(f"{c.lc.bbs_url}/ui/login?token=vdt_"), url
    # The cluster's CA is not the browser's: it is told to accept the BBS's certificate as it is.
    with headless_chromium(tmp_path_factory.mktemp("profile"), "--ignore-certificate-errors") as browser:
        browser.open(url)
        yield Dashboard(c, browser, url)


def test_the_overview_renders_the_cells_and_a_push_without_a_reload(dashboard: Dashboard) -> None:
    d, c = dashboard, dashboard.c
    too_long = c.cli("dashboard", "--expires", "2d")
    assert too_long.code == 2 and too_long.stderr.startswith("error: --expires: "), too_long.output
    assert len(too_long.stderr.splitlines()) == 1 and too_long.stdout == "", too_long.output
    cells = {cell["cell_id"]: cell["zone"] for cell in c.bbs.cells()}

    def tiles() -> dict[str, str]:
        shown = d.js("JSON.stringify([...document.querySelectorAll('#cells .zone')].flatMap((z) => "
                     "[...z.querySelectorAll('.cell')].map((t) => [t.dataset.cellId, z.dataset.zone])))")
        return dict(json.loads(shown))

    d.until(lambda: expect(tiles() == cells, f"tiles {tiles()}; page {d.page_state()}"),
            f"the page showing the cells {cells} by zone")
    assert d.js("location.pathname + location.search") == "/ui", "the token left the address bar"
    d.until(lambda: expect(d.js("document.getElementById('status').textContent") == "live", d.page_state()),
            "the page following the event stream")
    d.js("window.loadedOnce = 'yes'")  # a reload would lose it

    web = c.guid("web")
    c.bbs.desire(web, 3)
    wait_all_running(c.bbs, web, 3)

    def app_row() -> str:
        row = d.js(f"document.querySelector('#apps tr[data-app=\"{web}\"]')?.dataset.running")
        return expect(row == "3", f"running shown: {row!r}; page {d.page_state()}")

    d.until(app_row, f"the page showing {web} with 3 running")
    held = d.js("[...document.querySelectorAll('#cells .cell')]"
                ".reduce((n, t) => n + Number(t.dataset.instances), 0)")
    assert held >= 3, f"expected the tiles to hold the 3 instances, they show {held}"
    assert d.js("window.loadedOnce") == "yes", "the page was reloaded"
    assert d.js("document.querySelectorAll('#events li[data-type]').length") > 0, "no event listed"
    d.screenshot("dashboard.png")

    # The link was good for that one login: opened again (from a shell's history, say), it logs no one in.
    with httpx.Client(verify=c.lc.verify, follow_redirects=False, timeout=10) as stranger:
        again = stranger.get(d.login_url)
        assert again.status_code == 403 and "used already" in again.text, (again.status_code, again.text)
        assert "vendue_session" not in again.headers.get("set-cookie", ""), again.headers


def test_the_app_page_shows_the_placement_error_and_the_crash_reason(dashboard: Dashboard) -> None:
    d, c = dashboard, dashboard.c
    huge, crashing = c.guid("huge"), c.guid("crashing")
    c.bbs.desire(huge, 1, memory_mb=100_000)  # more than any cell has (LocalCluster's: 4096 MB)
    c.bbs.desire(crashing, 1, command=["sh", "-c", "exit 1"])

    def api_placement_error() -> str:
        [a] = c.bbs.actuals(huge)
        return str(expect(a["placement_error"], f"no placement error yet: {a}"))

    error = wait_for(api_placement_error, 30.0, f"{huge} refused by the auction")

    def api_crash_reason() -> str:
        [a] = c.bbs.actuals(crashing)
        expect(a["crash_reason"] and a["crash_count"] >= 1, f"no crash yet: {a}")
        return str(a["crash_reason"])

    reason = wait_for(api_crash_reason, 30.0, f"{crashing} crashed")
    assert reason == "exited with status 1", reason

    # The overview names why each is not running.
    def why(guid: str) -> list[str]:
        return d.texts(f'#apps tr[data-app="{guid}"] .reason')

    d.until(lambda: expect(f"placement error: {error}" in why(huge), f"why {why(huge)}; {d.page_state()}"),
            f"the overview naming {huge}'s placement error")
    d.until(lambda: expect(f"crash: {reason}" in why(crashing), f"why {why(crashing)}"),
            f"the overview naming {crashing}'s crash reason")

    d.go(f"#/apps/{huge}")

    def huge_page() -> bool:
        problems = d.texts('#app-problems [data-problem="placement error"]')
        row = d.texts('#app-instances tr[data-index="0"] .placement-error')
        return expect(problems == [f"placement error: {error}"] and row == [error],
               f"problems {problems}, instance row {row}; page {d.page_state()}")

    d.until(huge_page, f"{huge}'s page showing its placement error {error!r}")
    assert d.js("document.getElementById('app-status').dataset.status") == "unplaceable"
    assert d.texts('#app-summary [data-field="memory"]') == ["100000 MB"]
    d.until(lambda: expect(d.texts('#app-events li[data-kind="unplaceable"]'), d.texts("#app-events li")),
            f"{huge}'s unplaceable event on its page")
    d.screenshot("dashboard-app-unplaceable.png")

    d.go(f"#/apps/{crashing}")

    def crash_page() -> bool:
        shown = d.texts('#app-instances tr[data-index="0"] .crash-reason')
        events = d.js("[...document.querySelectorAll('#app-events li[data-kind=\"crashed\"]')].length")
        return expect(shown == [reason] and events >= 1, f"crash reason {shown}, crashed events {events}")

    d.until(crash_page, f"{crashing}'s page showing its crash reason {reason!r} and its crashes")
    assert d.texts('#app-problems [data-problem="crash"]') == [f"crash: {reason}"]

    # Its first crashes restart at once; the third waits out a back-off: a crash loop, named with when.
    def crash_loop() -> bool:
        row = "document.querySelector('#app-instances tr[data-index=\"0\"]')"
        state, next_restart = json.loads(d.js(f"JSON.stringify([{row}?.dataset.state, "
                                              f"{row}?.children[7].textContent])"))
        looping = "(crash loop, back-off 30s)" in (next_restart or "")
        return expect(state == "CRASHED" and looping and next_restart.startswith(("in ", "due now")),
                      f"state {state}, next restart {next_restart!r}")

    d.until(crash_loop, f"{crashing}'s page naming its crash loop and next restart")
    assert d.js("document.getElementById('app-status').dataset.status") == "crash loop"
    d.screenshot("dashboard-app-crashing.png")
    d.go("#/")


def test_the_cell_page_shows_the_cells_instances(dashboard: Dashboard) -> None:
    d, c = dashboard, dashboard.c
    spread = c.guid("spread")
    c.bbs.desire(spread, 4, memory_mb=64)
    running = wait_all_running(c.bbs, spread, 4)
    cell = running[0]["cell_id"]
    zone = next(x["zone"] for x in c.bbs.cells() if x["cell_id"] == cell)
    d.go(f"#/cells/{cell}")

    def api_instances() -> set[tuple[str, int]]:
        placed = [a for a in c.bbs.actuals(cell_id=cell) if a["state"] != "UNCLAIMED"]
        return {(a["process_guid"], a["index"]) for a in placed}

    def shown() -> set[tuple[str, int]]:
        rows = d.js("JSON.stringify([...document.querySelectorAll('#cell-instances tr[data-app]')]"
                    ".map((r) => [r.dataset.app, Number(r.dataset.index)]))")
        return {(g, i) for g, i in json.loads(rows)}

    def same() -> bool:
        api = api_instances()
        return expect((spread, 0) in api and shown() == api, f"API {sorted(api)}, page {sorted(shown())}")

    d.until(same, f"{cell}'s page listing the instances the API places there")
    assert d.texts('#cell-summary [data-field="zone"]') == [zone]
    assert d.js("document.getElementById('cell-state').dataset.state") == "present"
    allocated = d.js("document.querySelector('#cell-resources tr[data-resource=\"memory_mb\"]').children[3]"
                     ".textContent")
    assert int(allocated.split()[0]) >= 64, f"the cell's allocated memory: {allocated!r}"

    # Usage against limits, as GET /v1/usage says (each rep samples every few seconds).
    def usage_shown() -> bool:
        usage = c.bbs.http.get("/v1/usage", params={"cell_id": cell}).json()["items"]
        mine = [u for u in usage if u["process_guid"] == spread]
        rows = d.js("JSON.stringify([...document.querySelectorAll('#cell-instances tr[data-app]')]"
                    ".map((r) => [r.dataset.app, Number(r.dataset.index), r.children[7].textContent]))")
        memory = {(g, i): text for g, i, text in json.loads(rows)}
        return expect(mine and all(memory.get((u["process_guid"], u["index"]), "").endswith(
            f"/ {round(u['memory_limit_bytes'] / 1048576)} MB") for u in mine), f"API {mine}; page {memory}")

    d.until(usage_shown, f"{cell}'s page showing its instances' memory against their limits")
    d.screenshot("dashboard-cell.png")
    d.go("#/")


def test_the_app_page_shows_a_paused_rollout_and_its_reason(dashboard: Dashboard) -> None:
    d, c = dashboard, dashboard.c
    guid = c.guid("rolling")
    c.bbs.desire(guid, 1, memory_mb=64)
    wait_all_running(c.bbs, guid, 1)
    # A new version no cell can hold: the rollout pauses, naming the placement error (docs/rollouts.md).
    body = {"command": APP_COMMAND, "memory_mb": 1_000_000, "disk_mb": 128, "ports": [8080],
            "rollout": {"auto_revert": False}}
    assert c.bbs.http.put(f"/v1/desired_lrps/{guid}", json=body).status_code == 200

    def paused() -> dict:
        rollout = c.bbs.http.get(f"/v1/desired_lrps/{guid}/rollout").json()
        return dict(expect(rollout["state"] == "paused" and rollout, rollout))

    rollout = wait_for(paused, 60.0, f"{guid}'s rollout paused")
    d.go(f"#/apps/{guid}")

    def shown() -> bool:
        state = d.js("document.querySelector('#app-rollout [data-rollout-state]')?.dataset.rolloutState")
        text = d.js("document.getElementById('app-rollout').textContent")
        return expect(state == "paused" and rollout["reason"] in text and
                      f"{rollout['done']}/{rollout['total']}" in text, f"state {state!r}, text {text!r}")

    d.until(shown, f"{guid}'s page showing its paused rollout and why")
    assert d.texts('#app-summary [data-field="version"]') == ["2"]
    d.go("#/")


def test_the_tasks_panel_shows_a_failed_tasks_reason_and_its_result_as_text(dashboard: Dashboard) -> None:
    d, c = dashboard, dashboard.c
    guid = c.guid("failing-task")
    c.bbs.create_task(guid, ["sh", "-c", f"echo '{XSS}'; exit 1"])

    def completed() -> dict:
        task = c.bbs.task(guid)
        return dict(expect(task["state"] == "COMPLETED" and task, f"task {task['state']}"))

    task = wait_for(completed, 30.0, f"{guid} completed")
    assert task["failed"] and task["failure_reason"] and XSS in task["result"], task
    d.go("#/")

    def row() -> bool:
        reason = d.texts(f'#tasks tr[data-task="{guid}"] .reason')
        result = d.texts(f'#tasks tr[data-task="{guid}"] .result')
        return expect(reason == [task["failure_reason"]] and len(result) == 1 and XSS in result[0],
               f"reason {reason}, result {result}; page {d.page_state()}")

    d.until(row, f"the tasks panel showing {guid}'s failure reason {task['failure_reason']!r}")
    assert d.js("document.querySelectorAll('img').length") == 0, "a task's result became markup"
    assert d.js("window.xssRan === undefined"), "a task's result ran as script"
    d.js("document.getElementById('task-filter').value = 'failed'; "
         "document.getElementById('task-filter').dispatchEvent(new Event('change'))")
    d.until(lambda: expect(d.js(f"document.querySelector('#tasks tr[data-task=\"{guid}\"]') !== null") and
                           d.js("[...document.querySelectorAll('#tasks tr[data-task]')]"
                                ".every((r) => r.dataset.failed === 'true')"), d.texts("#tasks tr")),
            "the failed filter showing only failed tasks")


def test_events_from_before_the_page_opened_and_the_duration_sparklines(dashboard: Dashboard) -> None:
    d, c = dashboard, dashboard.c
    # Two auctions at least, while the first page follows the stream (so that the BBS builds their events).
    steps = c.guid("steps")
    c.bbs.desire(steps, 1, memory_mb=64)
    wait_all_running(c.bbs, steps, 1)
    c.bbs.scale(steps, 2)
    wait_all_running(c.bbs, steps, 2)
    before = c.bbs.http.get("/v1/events/recent", params={"limit": 1000})
    before.raise_for_status()
    newest = int(before.json()["last_event_id"].rsplit("-", 1)[1])
    # The stream's events (those of the apps' stories from before the first page followed have no id).
    kept_before = {e["id"] for e in before.json()["items"] if "id" in e}
    assert kept_before, "the earlier tests' events were kept (the first page followed the stream)"
    # A second page, opened now: what it lists of the past came from /v1/events/recent, not the stream.
    d.browser.open(f"{c.lc.bbs_url}/ui")
    d.until(lambda: expect(d.js("document.body?.dataset.recent") == "loaded", d.page_state()),
            "the new page reading the recent events")

    def listed_from_before() -> list[str]:
        ids = d.js("[...document.querySelectorAll('#events li[data-from=\"recent\"][data-id]')]"
                   ".map((li) => li.dataset.id)")
        old = [i for i in ids if int(i.rsplit("-", 1)[1]) <= newest]
        return expect(old and set(old) <= kept_before,
                      f"ids from /v1/events/recent {ids}; the newest before the page opened: {newest}")

    d.until(listed_from_before, "the page listing events from before it opened")

    def points(svg: str) -> int:
        count = d.js(f"document.getElementById('{svg}').dataset.points")
        polyline = d.js(f"document.querySelector('#{svg} polyline')?.getAttribute('points') || ''")
        return int(expect(int(count or 0) >= 2 and len(polyline.split()) == int(count),
                          f"{svg}: {count} points, polyline {polyline!r}") and count)

    auctions = c.bbs.http.get("/v1/events/recent", params={"type": "auction_completed"}).json()["items"]
    assert len(auctions) >= 2, f"expected the auctions of {steps} kept, saw {auctions}"
    d.until(lambda: points("spark-auctions"), "a sparkline of auction durations")
    d.until(lambda: points("spark-convergences"), "a sparkline of convergence durations")
    assert d.js("document.getElementById('last-auction').textContent") != "–"
    d.screenshot("dashboard-sparklines.png")


def test_the_overview_caps_each_zones_tiles_and_links_to_the_cells_list(dashboard: Dashboard) -> None:
    d, c = dashboard, dashboard.c
    d.go("#/")
    zones: dict[str, set[str]] = {}
    for cell in c.bbs.cells():
        zones.setdefault(cell["zone"], set()).add(cell["cell_id"])
    zone, cells = sorted(zones.items())[0]
    assert len(cells) >= 2, zones
    d.js("state.tilesPerZone = 1; render()")  # the cap a 1,000-cell cluster meets, at this cluster's size

    def capped() -> list[Any]:
        shown = json.loads(d.js("JSON.stringify([...document.querySelectorAll('#cells .zone')].map((z) => "
                                "[z.dataset.zone, z.querySelectorAll('.cell').length, "
                                "z.querySelector('a.more')?.dataset.more]))"))
        want = [[z, 1, str(len(ids) - 1)] for z, ids in sorted(zones.items())]
        return list(expect(shown == want and shown,
                           f"expected tiles and 'more' per zone {want}, saw {shown}"))

    d.until(capped, "one tile a zone and a link to the rest")
    d.js(f"document.querySelector('#cells .zone[data-zone=\"{zone}\"] a.more').click()")

    def listed() -> set[str]:
        rows = d.js("[...document.querySelectorAll('#cells-list tr[data-cell-id]')]"
                    ".map((r) => r.dataset.cellId)")
        return set(expect(set(rows) == cells and rows, f"expected {sorted(cells)} listed, saw {rows}; "
                          f"{d.page_state()}"))

    d.until(listed, f"the cells list showing the cells of {zone}")
    assert d.js("document.body.dataset.view") == "cells"
    d.js("state.tilesPerZone = TILES_PER_ZONE")
    d.go("#/")
