"""The README's metrics table (section "Metrics and health"), read the way the tests need it: which
series each component must export, and what names an alert rule may use."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Metrics and health"
COMPONENTS = ("bbs", "auctioneer", "rep")
# What a Prometheus client library exports for one metric of each type, besides the name itself.
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "counter": (), "gauge": ()}


@dataclass(frozen=True)
class MetricRow:
    series: str  # the name a scrape shows (a counter's with _total; a histogram's base name)
    type: str
    labels: tuple[str, ...]
    components: tuple[str, ...]

    def names(self) -> tuple[str, ...]:
        """The sample names a scrape shows for it."""
        suffixes = SUFFIXES[self.type]
        return tuple(self.series + suffix for suffix in suffixes) if suffixes else (self.series,)


def metrics_table(readme: Path = README) -> list[MetricRow]:
    text = readme.read_text()
    start = text.index(SECTION)
    section = text[start : text.index("\n## ", start + len(SECTION))]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        series, kind, labels, components, *_ = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows.append(
            MetricRow(
                series=series.strip("`"),
                type=kind,
                labels=tuple(re.findall(r"`(\w+)`", labels)),
                components=tuple(c.strip() for c in components.split(",")),
            )
        )
    return rows
