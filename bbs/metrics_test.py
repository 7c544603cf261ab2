"""Diego's BBS series: the last pass's counts while the convergence lease is held, none once it is lost."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from bbs.diego_counts import PassCounts
from bbs.metrics import DIEGO_GAUGES, BBSMetrics


def samples(metrics: BBSMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for s in family.samples
    }


def test_the_lease_holder_exports_the_last_pass_and_a_replica_that_lost_the_lease_exports_no_counts() -> None:
    metrics = BBSMetrics()
    before = samples(metrics)
    assert (
        before[("LockHeld", (("lease", "convergence"),))] == 0
        and before[("ConvergenceLRPRuns_total", ())] == 0
    )
    assert not any(name in DIEGO_GAUGES or name == "ConvergenceLRPDuration" for name, _ in before)

    metrics.diego.lease(True)
    metrics.diego.counted(PassCounts(lrps_desired=5, lrps_running=3, lrps_missing=2, present_cells=4))
    metrics.diego.converged(0.25)
    held = samples(metrics)
    assert {name for name in DIEGO_GAUGES} <= {name for name, _ in held}
    assert (held[("LRPsDesired", ())], held[("LRPsRunning", ())], held[("LRPsMissing", ())]) == (5, 3, 2)
    assert held[("PresentCells", ())] == 4 and held[("LockHeld", (("lease", "convergence"),))] == 1
    assert held[("ConvergenceLRPDuration", ())] == 250_000_000  # nanoseconds, as Diego's
    assert held[("ConvergenceLRPRuns_total", ())] == 1

    metrics.diego.lease(False)
    lost = samples(metrics)
    assert (
        lost[("LockHeld", (("lease", "convergence"),))] == 0 and lost[("ConvergenceLRPRuns_total", ())] == 1
    )
    assert not any(name in DIEGO_GAUGES or name == "ConvergenceLRPDuration" for name, _ in lost), lost
