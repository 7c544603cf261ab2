"""docs/workload-format.md's examples are what the code reads and writes: the input example parses
with deploy/simulator/workload.py, and the simulator's output on it has every field of the output
example, with the same values where the example's are not timings."""

from __future__ import annotations

import json
import re
from pathlib import Path

from deploy.simulator.engine import simulate
from deploy.simulator.workload import loads_workload

DOC = Path(__file__).resolve().parents[2] / "docs" / "workload-format.md"
TIMINGS = {"seconds", "placements_per_s"}


def examples() -> tuple[str, str]:
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 2, (
        f"{DOC.name}: expected the input and the output example, found {len(blocks)} blocks"
    )
    return blocks[0], blocks[1]


def test_the_input_example_parses() -> None:
    workload = loads_workload(examples()[0])
    assert [c.id for c in workload.cells] == ["cell-0"]
    assert [(lrp.process_guid, lrp.index) for lrp in workload.lrps] == [("web", 0)]
    assert [t.task_guid for t in workload.tasks] == ["migrate"]


def test_the_simulator_writes_the_output_example_for_the_input_example() -> None:
    source, output = examples()
    expected = json.loads(output)
    got = simulate(loads_workload(source), strategy=expected["strategy"], engine=expected["engine"])
    missing = sorted(set(expected) - set(got))
    assert missing == [], f"fields of the doc's output the simulator does not write: {missing}"
    differing = {k: (v, got[k]) for k, v in expected.items() if k not in TIMINGS and got[k] != v}
    assert differing == {}, f"(doc, simulator) where they differ: {differing}"
