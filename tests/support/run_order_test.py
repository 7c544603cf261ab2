"""The suite's module order: the longest listed modules first, then those that start processes, then the rest,
each module's tests together and in their order."""

from __future__ import annotations

from tests.support.run_order import LONGEST_MODULES, longest_first


def test_the_longest_modules_go_first_then_the_e2e_ones_each_module_kept_in_its_order() -> None:
    first, second = LONGEST_MODULES[0], LONGEST_MODULES[1]
    # b/policy_test.py: one test of it starts a process, the other not; the module stays in one piece.
    items = [("a/unit_test.py", 1), ("b/policy_test.py", 1), ("tests/e2e/test_x.py", 1), (second, 1),
             ("b/policy_test.py", 2), ("a/unit_test.py", 2), (first, 1), (second, 2),
             ("tests/e2e/test_x.py", 2), (first, 2)]
    e2e = {("b/policy_test.py", 2)}
    ordered = longest_first(items, lambda item: item[0],
                            lambda item: item in e2e or item[0].startswith(("tests/e2e", first, second)))
    assert ordered == [(first, 1), (first, 2), (second, 1), (second, 2), ("b/policy_test.py", 1),
                       ("b/policy_test.py", 2), ("tests/e2e/test_x.py", 1), ("tests/e2e/test_x.py", 2),
                       ("a/unit_test.py", 1), ("a/unit_test.py", 2)]


def test_every_listed_module_exists_once() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert len(set(LONGEST_MODULES)) == len(LONGEST_MODULES)
    assert [m for m in LONGEST_MODULES if not (root / m).is_file()] == []
