"""The property every strategy's fast picker keeps: the same assignments and failures as its reference
(the executable specification) on every input. One test, parametrised by strategy and by the inputs that
strategy's decisions turn on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.engine_workloads import (
    Workload,
    assert_engines_agree,
    diego_workloads,
    objective_workloads,
    workloads,
)


@dataclass(frozen=True)
class Case:
    strategy: str
    inputs: st.SearchStrategy[Workload]
    examples: int
    what: str


SPECIFIC = ("dea", "loadmark", "binpack", "random")
CASES = [
    Case("diego", diego_workloads(), 150, "knobs"),
    Case("diego", diego_workloads(cache=True), 80, "cache"),
    Case("objective", objective_workloads(), 60, "objectives"),
    *(Case(name, workloads(), 40, "plain") for name in SPECIFIC),
    Case("service", workloads(service=True), 40, "service"),
    *(Case(name, workloads(service=True, mixed=True), 25, "mixed") for name in (*SPECIFIC, "service")),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.strategy}-{c.what}" for c in CASES])
def test_fast_equals_reference(case: Case) -> None:
    @settings(max_examples=case.examples, deadline=None)
    @given(case.inputs)
    def agree(workload: Workload) -> None:
        assert_engines_agree(workload, case.strategy)

    agree()
