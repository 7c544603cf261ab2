"""The registry walked: every registered filter, and every strategy's own, under every strategy and
both engines. A cell the filter rejects is never chosen; when it is the only cell, the diagnosis names
the filter; the filter's two forms agree. Each filter's `Example` is its case: a new filter needs no
new test."""

import pytest

from placement.testing import lrp_start

from ..ask import STRATEGIES
from ..cell_offer import CellOffer, Resources
from ..diagnosis import diagnose
from ..scheduler import schedule
from ..state import AuctionState
from ..strategies import pickers
from ..types import SchedulerConfig
from ..work import LRPStart
from .base import Filter
from .registry import COMPATIBILITY, REQUEST, RESOURCES, filter_chain


def strategy_filters(strategy: str, config: SchedulerConfig | None = None) -> tuple[Filter, ...]:
    """A strategy's own filters, as its reference picker makes them for the config."""
    state = AuctionState([], config or SchedulerConfig(strategy=strategy))
    return tuple(pickers("reference")[strategy](state).filters)


CASES = [(f, strategy) for f in (*COMPATIBILITY, *REQUEST, *RESOURCES) for strategy in STRATEGIES]
CASES += [(f, strategy) for strategy in STRATEGIES for f in strategy_filters(strategy)]


def case_id(case) -> str:
    return f"{case[0].name}-{case[1]}"


def cell(cell_id: str, fields) -> CellOffer:
    fields = dict(fields)
    available = Resources(*fields.pop("available", (100, 100, 10)))
    return CellOffer(cell_id, "z0", Resources(100, 100, 10), available, **fields)


def setting(f: Filter, strategy: str, engine: str) -> tuple[LRPStart, CellOffer, CellOffer, SchedulerConfig]:
    example = f.example
    item = lrp_start(**{"process_guid": "app", "index": 0, "memory_mb": 10, "disk_mb": 10, **example.lrp})
    config = SchedulerConfig(strategy=strategy, engine=engine, **example.config)
    return item, cell("admitted", example.admitted), cell("rejected", example.rejected), config


def test_every_filter_has_a_distinct_name():
    names = [f.name for f, _ in CASES]
    assert len(set(names)) == len({id(f) for f, _ in CASES}), names


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_rejected_cell_is_never_chosen(case, engine):
    f, strategy = case
    item, admitted, rejected, config = setting(f, strategy, engine)
    # the rejected cell first: where every other rule ties, input order would choose it
    result = schedule([rejected, admitted], [item], [], config)
    assert [a.cell_id for a in result.lrp_assignments] == ["admitted"], result.failures


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_diagnosis_names_the_filter(case, engine):
    f, strategy = case
    item, _, rejected, config = setting(f, strategy, engine)
    result = schedule([rejected], [item], [], config)
    assert not result.lrp_assignments
    (failure,) = result.failures
    state = AuctionState([rejected], config)
    expected_error = f"insufficient resources: {f.name}" if f.resource else f.error(item)
    assert failure.error == expected_error
    assert failure.detail == f"0/1 cells fit: {f.summary(state.slots, item)}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_scalar_and_vectorised_forms_agree_and_the_diagnoses_too(case):
    f, strategy = case
    item, admitted, rejected, config = setting(f, strategy, "fast")
    own = strategy_filters(strategy, config)
    if f not in filter_chain(item):  # a strategy's own: as the strategy makes it for the example's config
        f = next(g for g in own if g.name == f.name)
    state = AuctionState([admitted, rejected], config)
    assert [f.rejects(slot, item) for slot in state.slots] == [False, True]
    assert f.admits(state.columns, item).tolist() == [True, False]
    assert diagnose(state, item, own) == diagnose(state, item, own, vectorised=True)
