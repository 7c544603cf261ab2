"""`vendue simulate` through the CLI: JSON output, summaries, generation, one-line errors with exit 2."""

from __future__ import annotations

import json
import re
import sys

import pytest
from typer.testing import CliRunner

from deploy.cli import app

from . import simulate_cmd  # noqa: F401 - registers the command on `app`

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["simulate", *args])


def write(tmp_path, data, name: str = "w.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


WORKLOAD = {
    "name": "cli",
    "cells": [{"id": f"cell-{i}", "zone": f"z{i % 2}", "memory_mb": 1024, "disk_mb": 1024, "containers": 8}
              for i in range(4)],
    "lrps": [{"process_guid": "web", "index": i, "memory_mb": 128, "disk_mb": 128} for i in range(6)],
    "tasks": [{"task_guid": "t", "memory_mb": 64, "disk_mb": 64}],
}


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_json_output(tmp_path, engine: str) -> None:
    result = invoke("--workload", write(tmp_path, WORKLOAD), "--strategy", "diego", "--engine", engine,
                    "--seed", "4", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["workload"], report["engine"], report["seed"]) == ("cli", engine, 4)
    assert report["placed"] == 7 and report["failed"] == 0
    assert report["per_zone_instances"] == {"z0": 3, "z1": 3}


def test_unnamed_workload_takes_the_file_name(tmp_path) -> None:
    unnamed = {k: v for k, v in WORKLOAD.items() if k != "name"}
    result = invoke("--workload", write(tmp_path, unnamed, "nightly.json"), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["workload"] == "nightly"


def test_readable_summary(tmp_path) -> None:
    result = invoke("--workload", write(tmp_path, WORKLOAD))
    assert result.exit_code == 0, result.output
    assert "placed 7" in result.stdout and "cv_memory" in result.stdout


def test_generate_writes_a_file_simulate_accepts(tmp_path) -> None:
    out = tmp_path / "gen.json"
    result = invoke("--generate", "mixed", "--cells", "6", "--zones", "2", "--instances", "50", "--seed", "3",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert len(data["cells"]) == 6 and len(data["lrps"]) == 50
    again = invoke("--workload", str(out), "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert report["placed"] + report["failed"] == 50 + len(data["tasks"])


def test_generate_to_stdout(tmp_path) -> None:
    result = invoke("--generate", "cold-start-small", "--cells", "4")
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)["lrps"]) == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "nope"], "error: --strategy: unknown strategy 'nope'"),
        (["--engine", "turbo"], "error: --engine: unknown engine 'turbo'"),
    ],
)
def test_bad_options_fail_with_one_line(tmp_path, args, message: str) -> None:
    result = invoke("--workload", write(tmp_path, WORKLOAD), *args, "--json")
    assert result.exit_code == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_malformed_workload_names_the_field(tmp_path) -> None:
    bad = json.loads(json.dumps(WORKLOAD))
    bad["lrps"][3]["memory_mb"] = 0
    result = invoke("--workload", write(tmp_path, bad), "--json")
    assert result.exit_code == 2
    assert result.stderr == "error: lrps[3].memory_mb: must be >= 1\n"


def test_invalid_json_names_line_and_column(tmp_path) -> None:
    result = invoke("--workload", write(tmp_path, '{\n  "cells": [}\n'), "--json")
    assert result.exit_code == 2
    assert "invalid JSON at line 2 column 13" in result.stderr and result.stderr.count("\n") == 1


def test_missing_file_and_missing_option(tmp_path) -> None:
    result = invoke("--workload", str(tmp_path / "absent.json"))
    assert result.exit_code == 2 and result.stderr.endswith("absent.json: no such file\n")
    result = invoke("--json")
    assert result.exit_code == 2 and result.stderr.startswith("error: --workload: required")


def test_unknown_generator_and_conflicting_options(tmp_path) -> None:
    result = invoke("--generate", "nope")
    assert result.exit_code == 2 and result.stderr.startswith("error: --generate: unknown generator 'nope'")
    result = invoke("--generate", "mixed", "--workload", write(tmp_path, WORKLOAD))
    assert result.exit_code == 2 and "one or the other" in result.stderr


def test_explain_names_the_chosen_cell_and_every_cells_verdict(tmp_path):
    import json as _json

    from typer.testing import CliRunner

    from deploy.cli import _register, app

    _register()
    workload = {
        "name": "why",
        "cells": [
            {"id": "a", "zone": "z0", "memory_mb": 100, "disk_mb": 100, "containers": 10},
            {"id": "b", "zone": "z1", "memory_mb": 40, "disk_mb": 100, "containers": 10},
            {"id": "c", "zone": "z1", "memory_mb": 100, "disk_mb": 100, "containers": 10, "stack": "windows"},
        ],
        "lrps": [{"process_guid": "web", "index": i, "memory_mb": 50, "disk_mb": 1} for i in range(2)],
    }
    path = tmp_path / "why.json"
    path.write_text(_json.dumps(workload))
    runner = CliRunner()
    result = runner.invoke(app, ["simulate", "--workload", str(path), "--explain", "web:1", "--json"])
    assert result.exit_code == 0, result.output
    why = _json.loads(result.stdout)
    # web/0 went to a (z0); web/1 prefers the empty zone z1, where b is too small and c the wrong stack,
    # so it falls back to a, the fuller zone.
    assert why["chosen"] == "a"
    verdicts = {c["cell_id"]: c["rejected_by"] for c in why["cells"]}
    assert verdicts == {"a": None, "b": "memory", "c": "stack"}
    missing = runner.invoke(app, ["simulate", "--workload", str(path), "--explain", "web:9"])
    assert missing.exit_code == 2
    assert "--explain" in missing.stderr


# --- comparing strategies: --scenario, --strategy a,b, --transport, --report -----------------------------


def test_list_scenarios_one_line_each() -> None:
    from .scenarios import SCENARIOS

    result = invoke("--list-scenarios")
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == [*SCENARIOS, "zone-outage-and-return"]
    assert "scale-250k" in result.stdout and "[diego]" in result.stdout


def test_the_zone_outage_scenario_reports_the_spread_and_writes_its_report(tmp_path) -> None:
    result = invoke("--scenario", "zone-outage-and-return")
    assert result.exit_code == 0, result.output
    assert "after the rebalance 1" in result.stdout or "after the rebalance 0" in result.stdout, result.stdout
    path = tmp_path / "outage.json"
    written = invoke("--scenario", "zone-outage-and-return", "--report", str(path), "--json")
    assert written.exit_code == 0, written.output
    assert json.loads(path.read_text())["worst_zone_skew"] == json.loads(written.stdout)["worst_zone_skew"]


def test_two_strategies_inproc_with_a_report(tmp_path) -> None:
    report = tmp_path / "az.html"
    result = invoke("--scenario", "az-distribution", "--strategy", "diego,binpack", "--transport", "inproc",
                    "--report", str(report))
    assert result.exit_code == 0, result.output
    assert "diego" in result.stdout and "binpack" in result.stdout and f"wrote {report}" in result.stdout
    data = json.loads((tmp_path / "az.json").read_text())
    assert (data["scenario"], data["transport"], data["cells"], data["instances"]) == (
        "az-distribution", "inproc", 14, 232)
    by_strategy = {s["strategy"]: s for s in data["strategies"]}
    assert list(by_strategy) == ["diego", "binpack"]
    for s in by_strategy.values():
        assert (s["placed"], s["failed"], s["rounds"]) == (232, 0, 1)
        # Per auction: a state request per cell; the BBS's cell list and the auction's report.
        assert s["communications_by_kind"]["rep_state"] == 14 and s["communications_by_kind"]["bbs"] == 2
        assert s["seconds"] > 0 and s["wait_s"]["max"] <= s["seconds"]
        assert sum(c["instances"] for c in s["per_cell"]) == 232
        assert len(s["app_zone_split"]) == 30
    # diego spreads every app over the zones and the cells; binpack fills the first cells.
    assert by_strategy["diego"]["worst_az_skew"] <= 1 < by_strategy["binpack"]["cv_memory"]
    assert by_strategy["diego"]["cv_memory"] < by_strategy["binpack"]["cv_memory"]
    assert by_strategy["binpack"]["min_instances_per_cell"] == 0
    assert by_strategy["binpack"]["communications_by_kind"]["rep_work"] < 14
    page = report.read_text()
    for chart in ("summary-table", "summary-bars", "cell-allocation", "app-zones", "az-skew", "wait-times"):
        assert f'id="{chart}"' in page
    external = re.findall(r"<(?:script|link)\b[^>]*\b(?:src|href)=[^>]*>", page)
    assert external == []  # plotly.js is inlined: the page opens offline
    assert len(page) < 10_000_000


def test_json_report_for_a_workload_file_on_two_strategies(tmp_path) -> None:
    result = invoke("--workload", write(tmp_path, WORKLOAD), "--strategy", "diego,dea", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["scenario"] == "cli" and data["instances"] == 6 and data["tasks"] == 1
    assert [s["strategy"] for s in data["strategies"]] == ["diego", "dea"]
    assert all(s["placed"] == 7 and s["failed"] == 0 for s in data["strategies"])
    assert result.stderr == ""  # no progress bar when not on a terminal / with --json


def test_a_scenario_s_default_strategies(tmp_path) -> None:
    result = invoke("--scenario", "dea-example", "--json")
    assert result.exit_code == 0, result.output
    assert [s["strategy"] for s in json.loads(result.stdout)["strategies"]] == ["dea", "diego"]


def test_scenario_out_writes_a_workload_file_simulate_accepts(tmp_path) -> None:
    out = tmp_path / "low.json"
    result = invoke("--scenario", "low-memory", "--out", str(out))
    assert result.exit_code == 0, result.output
    again = invoke("--workload", str(out), "--json")
    assert again.exit_code == 0, again.output
    contract = json.loads(again.stdout)
    assert contract["workload"] == "low-memory" and contract["placed"] + contract["failed"] == 90
    assert contract["failures_by_error"] == {"insufficient resources: memory": contract["failed"]}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--scenario", "nope"],
            "error: --scenario: unknown scenario 'nope' (expected one of cold-start-small,",
        ),
        (
            ["--scenario", "dea-example", "--strategy", "diego,nope"],
            "error: --strategy: unknown strategy 'nope'",
        ),
        (
            ["--scenario", "dea-example", "--strategy", "diego,"],
            "error: --strategy: expected NAME or NAME,NAME",
        ),
        (
            ["--scenario", "dea-example", "--strategy", "dea,dea"],
            "error: --strategy: 'dea,dea' names a strategy twice",
        ),
        (
            ["--scenario", "dea-example", "--transport", "carrier-pigeon"],
            "error: --transport: unknown transport",
        ),
        (["--scenario", "dea-example", "--engine", "turbo"], "error: --engine: unknown engine 'turbo'"),
        (
            ["--scenario", "dea-example", "--report", "/nonexistent-dir/r.html"],
            "error: --report: directory /nonexistent-dir does not exist",
        ),
        (["--scenario", "dea-example", "--report", "r.json"], "error: --report: r.json would be overwritten"),
        (["--scenario", "dea-example", "--explain", "web:0"], "error: --explain: works on a --workload"),
        (["--transport", "http"], "error: --workload or --scenario: give one"),
    ],
)
def test_bad_comparison_input_is_one_line_and_exit_2(args, message: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_a_report_without_plotly_names_the_extra_before_running(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(
        sys.modules, "plotly", None
    )  # `import plotly` raises ImportError, as when not installed
    result = invoke("--scenario", "dea-example", "--report", str(tmp_path / "r.html"))
    assert result.exit_code == 2, result.output
    assert result.stderr == "error: --report: needs plotly, which the report extra installs: " \
                            "pip install 'vendue[report]'\n"
    assert result.stdout == "" and list(tmp_path.iterdir()) == []


def test_scenario_and_workload_together_are_refused(tmp_path) -> None:
    result = invoke("--scenario", "dea-example", "--workload", write(tmp_path, WORKLOAD))
    assert (
        result.exit_code == 2 and result.stderr == "error: --scenario and --workload: give one or the other\n"
    )


def test_http_refuses_what_the_api_cannot_express_before_starting_anything(tmp_path) -> None:
    gaps = json.loads(json.dumps(WORKLOAD))
    gaps["lrps"][2]["index"] = 7  # web places 0, 1, 7, 3, 4, 5: not consecutive
    result = invoke("--workload", write(tmp_path, gaps), "--transport", "http")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: lrps: 'web' places indices") and result.stderr.count("\n") == 1
