"""`vendue simulate` through the CLI: JSON output, summaries, generation, one-line errors with exit 2."""

from __future__ import annotations

import json

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
