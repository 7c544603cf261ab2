from __future__ import annotations

import pytest

from .ledger import (
    ABSENT,
    ACKNOWLEDGED,
    NOT_SENT,
    PRESENT,
    REFUSED,
    UNKNOWN,
    Ledger,
    missing_writes,
)


def test_the_last_acknowledged_write_is_the_only_acceptable_state() -> None:
    ledger = Ledger()
    ledger.end(ledger.begin("desire", "a", 3), ACKNOWLEDGED, 201)
    ledger.end(ledger.begin("scale", "a", 1), ACKNOWLEDGED, 200)
    ledger.end(ledger.begin("scale", "a", 4), REFUSED, 422, "instances")
    ledger.end(ledger.begin("scale", "a", 2), NOT_SENT, detail="ConnectTimeout")
    expected = ledger.expectations()
    assert expected.lrps == {"a": frozenset({1})}
    assert missing_writes(expected, {"a": 1}, set()) == {}
    wrong = missing_writes(expected, {"a": 3}, set())
    assert wrong["a"].startswith("the BBS shows 3, expected 1 after #1 scale a =1: acknowledged 200")


def test_an_acknowledged_delete_must_leave_the_app_absent() -> None:
    ledger = Ledger()
    ledger.end(ledger.begin("desire", "a", 2), ACKNOWLEDGED, 201)
    ledger.end(ledger.begin("delete", "a"), ACKNOWLEDGED, 204)
    assert ledger.expectations().lrps == {"a": frozenset({ABSENT})}
    assert "shows 2, expected absent" in missing_writes(ledger.expectations(), {"a": 2}, set())["a"]


def test_an_unknown_outcome_accepts_either_state_from_then_on_and_quarantines_the_app() -> None:
    ledger = Ledger()
    ledger.end(ledger.begin("desire", "a", 2), ACKNOWLEDGED, 201)
    ledger.end(ledger.begin("scale", "a", 4), UNKNOWN, detail="ReadTimeout")
    assert ledger.expectations().lrps == {"a": frozenset({2, 4})}
    assert set(ledger.quarantined()) == {"a"}
    # Were it written again, the late commit of the unknown one could still undo it: both stay acceptable.
    ledger.end(ledger.begin("scale", "a", 1), ACKNOWLEDGED, 200)
    assert ledger.expectations().lrps == {"a": frozenset({1, 2, 4})}


def test_a_resolve_ends_the_quarantine_with_what_the_bbs_showed() -> None:
    ledger = Ledger()
    ledger.end(ledger.begin("desire", "a", 2), ACKNOWLEDGED, 201)
    ledger.end(ledger.begin("delete", "a"), UNKNOWN, detail="ReadTimeout")
    ledger.end(ledger.begin("resolve", "a", None), ACKNOWLEDGED)  # the BBS showed it absent
    assert ledger.quarantined() == {} and ledger.expectations().lrps == {"a": frozenset({ABSENT})}
    ledger.end(ledger.begin("desire", "a", 3), ACKNOWLEDGED, 201)
    assert ledger.expectations().lrps == {"a": frozenset({3})}


def test_a_write_in_flight_is_acceptable_either_way() -> None:
    ledger = Ledger()
    ledger.end(ledger.begin("desire", "a", 2), ACKNOWLEDGED, 201)
    ledger.begin("delete", "a")
    assert ledger.expectations().lrps == {"a": frozenset({2, ABSENT})}


def test_tasks_acknowledged_must_be_listed_and_refused_ones_must_not() -> None:
    ledger = Ledger()
    ledger.end(ledger.begin("task", "t1"), ACKNOWLEDGED, 201)
    ledger.end(ledger.begin("task", "t2"), REFUSED, 409)
    ledger.end(ledger.begin("task", "t3"), UNKNOWN, detail="ReadTimeout")
    expected = ledger.expectations()
    assert expected.tasks == {"t1": frozenset({PRESENT}), "t2": frozenset({ABSENT}),
                              "t3": frozenset({PRESENT, ABSENT})}
    assert set(missing_writes(expected, {}, {"t2", "t3"})) == {"t1", "t2"}
    assert ledger.counts() == {"task": {ACKNOWLEDGED: 1, REFUSED: 1, UNKNOWN: 1}}


def test_unknown_kinds_and_outcomes_are_refused() -> None:
    ledger = Ledger()
    with pytest.raises(ValueError, match="kind"):
        ledger.begin("rename", "a")
    with pytest.raises(ValueError, match="outcome"):
        ledger.end(ledger.begin("delete", "a"), "maybe")
