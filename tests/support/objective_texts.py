"""Test support (imports hypothesis): random well-typed objective texts for property tests.

A few huge literals can make a text longer than the 1 KB cap; tests that need a parse `assume` it away.
"""

from __future__ import annotations

from hypothesis import strategies as st

INFINITE = f"({'9' * 308} * 10)"  # overflows to inf (a literal beyond the largest float is refused)
NUMBER_LITERALS = st.sampled_from(["0", "1", "2", "3", "0.25", "0.5", "7", "1000", "4096", INFINITE])
NUMERIC_ATTRIBUTES = st.sampled_from([
    "ai.InstanceNumber", "ai.AppID", "ai.TotalInstances", "ai.RequiredMemoryMB", "ai.RequiredDiskMB",
    "r.AvailableMemoryMB", "r.AvailableDiskMB", "r.TotalMemoryMB", "r.TotalDiskMB", "r.AvailZoneNumber",
])
STRING_COUNTS = st.sampled_from([
    "count(ai.AppSourceBlobID, r.CachedBlobIDs)", "count(ai.Stack, r.Stack)",
    "count(ai.Stack, r.CachedBlobIDs)", "count(ai.AppSourceBlobID, r.Stack)",
])


def _binary(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(children, st.sampled_from(["+", "-", "*", "/"]), children).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")


# Moduli: numbers and azs only, as the language insists.
CONSTANTS = st.recursive(st.one_of(NUMBER_LITERALS, st.just("azs")), _binary, max_leaves=3)


def _compound(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        _binary(children),
        children.map(lambda e: f"-{e}"),
        st.tuples(children, CONSTANTS).map(lambda t: f"({t[0]} mod {t[1]})"),
        children.map(lambda e: f"count({e}, r.RunningAppIDs)"),
    )


EXPRESSIONS = st.recursive(
    st.one_of(NUMBER_LITERALS, st.just("azs"), NUMERIC_ATTRIBUTES, STRING_COUNTS,
              st.just("count(ai.AppID, r.RunningAppIDs)")),
    _compound,
    max_leaves=8,
)
