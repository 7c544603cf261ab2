"""`vendue simulate --report FILE.html`: one self-contained HTML page (plotly, its JavaScript inlined, so
it opens offline) and FILE.json beside it with every number.

Charts, one `<div class="plotly-graph-div">` each:
- `summary-table`, `summary-bars`: the strategies side by side (placed/failed, seconds, communications,
  cv_memory, worst AZ skew, p95 wait);
- `cell-allocation`: memory allocated per cell (what was there before in grey), cells grouped and
  coloured by zone, one panel per strategy, against each cell's capacity;
- `app-zones`: each app's instances per zone, one heatmap per strategy (the largest apps when there are
  many; report.json has them all), and `az-skew`: how many apps have each AZ skew;
- `wait-times`: the distribution of waits (submitted to placed), per strategy.

Large runs are aggregated before they reach the page (histograms, not 250,000 waits; 40 apps in the
heatmap), so the file stays a few megabytes over plotly.js's own ~5 MB.

plotly comes with the `report` extra (`pip install 'vendue[report]'`), not with every install: a rep or a
BBS has no use for it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

HEATMAP_APPS = 40
CHART_IDS = ("summary-table", "summary-bars", "cell-allocation", "app-zones", "az-skew", "wait-times")
ZONE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
PREFILL_COLOUR = "#b0b0b0"


REPORT_EXTRA = "vendue[report]"


def missing_dependency() -> str | None:
    """Why a report cannot be written here (plotly not installed), or None."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return f"needs plotly, which the report extra installs: pip install '{REPORT_EXTRA}'"
    return None


def json_path(html_path: Path) -> Path:
    return html_path.with_suffix(".json")


def _zone_colours(zones: list[str]) -> dict[str, str]:
    return {z: ZONE_COLOURS[i % len(ZONE_COLOURS)] for i, z in enumerate(zones)}


def summary_table(report: dict[str, Any]):
    import plotly.graph_objects as go

    rows = report["strategies"]
    header = ["strategy", "placed", "failed", "seconds", "rounds", "communications", "cv_memory",
              "worst AZ skew (app)", "instances/cell min-max", "wait mean / p95 / max (s)"]
    cells = [
        [r["strategy"] for r in rows],
        [r["placed"] for r in rows],
        [r["failed"] for r in rows],
        [f"{r['seconds']:.3f}" for r in rows],
        [r["rounds"] for r in rows],
        [r["communications"] for r in rows],
        [f"{r['cv_memory']:.4f}" for r in rows],
        [f"{r['worst_az_skew']} ({r['worst_az_skew_app'] or '-'})" for r in rows],
        [f"{r['min_instances_per_cell']}-{r['max_instances_per_cell']}" for r in rows],
        [f"{r['wait_s']['mean']:.3f} / {r['wait_s']['p95']:.3f} / {r['wait_s']['max']:.3f}" for r in rows],
    ]
    fig = go.Figure(go.Table(header={"values": header, "align": "left", "fill_color": "#e8eef6"},
                             cells={"values": cells, "align": "left"}))
    fig.update_layout(title="Strategies side by side", height=150 + 48 * len(rows), margin={"t": 50, "b": 10})
    return fig


def summary_bars(report: dict[str, Any]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = report["strategies"]
    names = [r["strategy"] for r in rows]
    panels = [
        ("placed / failed", None),
        ("seconds", lambda r: r["seconds"]),
        ("communications", lambda r: r["communications"]),
        ("cv_memory (lower: more even)", lambda r: r["cv_memory"]),
        ("worst AZ skew of any app", lambda r: r["worst_az_skew"]),
        ("p95 wait (s)", lambda r: r["wait_s"]["p95"]),
    ]
    fig = make_subplots(rows=2, cols=3, subplot_titles=[title for title, _ in panels])
    for i, (title, value) in enumerate(panels):
        row, col = i // 3 + 1, i % 3 + 1
        if value is None:
            fig.add_trace(
                go.Bar(x=names, y=[r["placed"] for r in rows], name="placed", marker_color="#2ca02c"),
                row=row,
                col=col,
            )
            fig.add_trace(
                go.Bar(x=names, y=[r["failed"] for r in rows], name="failed", marker_color="#d62728"),
                row=row,
                col=col,
            )
        else:
            fig.add_trace(go.Bar(x=names, y=[value(r) for r in rows], name=title, showlegend=False,
                                 marker_color="#1f77b4"), row=row, col=col)
    fig.update_layout(barmode="stack", height=560, title="The numbers, strategy by strategy")
    return fig


def cell_allocation(report: dict[str, Any]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = report["strategies"]
    colours = _zone_colours(report["zones"])
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=min(0.12, 0.3 / len(rows)),
        subplot_titles=[f"{r['strategy']}: memory allocated per cell, by zone" for r in rows],
    )
    for i, r in enumerate(rows, start=1):
        cells = sorted(r["per_cell"], key=lambda c: (c["zone"], c["cell_id"]))
        x = [c["cell_id"] for c in cells]
        if any(c["prefill_mb"] for c in cells):
            fig.add_trace(
                go.Bar(
                    x=x,
                    y=[c["prefill_mb"] for c in cells],
                    name="there before",
                    marker_color=PREFILL_COLOUR,
                    showlegend=i == 1,
                    legendgroup="prefill",
                ),
                row=i,
                col=1,
            )
        for zone in report["zones"]:
            in_zone = [c for c in cells if c["zone"] == zone]
            fig.add_trace(go.Bar(
                x=[c["cell_id"] for c in in_zone], y=[c["allocated_mb"] - c["prefill_mb"] for c in in_zone],
                name=f"zone {zone}", marker_color=colours[zone], showlegend=i == 1, legendgroup=zone,
                customdata=[[c["instances"], c["memory_mb"]] for c in in_zone],
                hovertemplate="%{x}<br>placed %{y} MB<br>%{customdata[0]} instances<br>"
                              "capacity %{customdata[1]} MB<extra></extra>",
            ), row=i, col=1)
        fig.add_trace(go.Scatter(x=x, y=[c["memory_mb"] for c in cells], mode="markers", name="capacity",
                                 marker={"symbol": "line-ew-open", "color": "#333", "size": 8},
                                 showlegend=i == 1, legendgroup="capacity"), row=i, col=1)
        fig.update_yaxes(title_text="MB", row=i, col=1)
    many = len(rows[0]["per_cell"]) > 80 if rows else False
    order = (
        [c["cell_id"] for c in sorted(rows[0]["per_cell"], key=lambda c: (c["zone"], c["cell_id"]))]
        if rows
        else []
    )
    fig.update_xaxes(type="category", showticklabels=False, categoryorder="array", categoryarray=order)
    fig.update_xaxes(showticklabels=not many, row=len(rows), col=1)  # names under the last panel only
    fig.update_layout(
        barmode="stack",
        bargap=0.0 if many else 0.1,
        height=max(360, 260 * len(rows)),
        title="Per-cell allocation, cells grouped by zone" + (" (cell names hidden)" if many else ""),
    )
    return fig


def app_zones(report: dict[str, Any]):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = report["strategies"]
    zones = report["zones"]
    totals: dict[str, int] = {}
    for r in rows:
        for guid, split in r["app_zone_split"].items():
            totals[guid] = max(totals.get(guid, 0), sum(split.values()))
    apps = sorted(totals, key=lambda g: (-totals[g], g))[:HEATMAP_APPS]
    shown = (
        f"the {len(apps)} largest of {len(totals)} apps"
        if len(totals) > len(apps)
        else f"all {len(apps)} apps"
    )
    fig = make_subplots(rows=1, cols=max(1, len(rows)), shared_yaxes=True,
                        subplot_titles=[r["strategy"] for r in rows])
    for i, r in enumerate(rows, start=1):
        z = [[r["app_zone_split"].get(g, {}).get(zone, 0) for zone in zones] for g in apps]
        fig.add_trace(go.Heatmap(z=z, x=zones, y=apps, colorscale="Blues", showscale=i == len(rows),
                                 text=z, texttemplate="%{text}" if len(apps) <= HEATMAP_APPS else None,
                                 hovertemplate="%{y} in %{x}: %{z}<extra></extra>"), row=1, col=i)
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(height=max(320, 140 + 18 * len(apps)),
                      title=f"Each app's instances per zone ({shown}, prefill included)")
    return fig


def az_skew(report: dict[str, Any]):
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in report["strategies"]:
        histogram = {int(k): v for k, v in r["az_skew_histogram"].items()}
        fig.add_trace(go.Bar(x=list(histogram), y=list(histogram.values()), name=r["strategy"]))
    fig.update_layout(barmode="group", height=360, title="Apps by AZ skew (max - min instances per zone)",
                      xaxis_title="AZ skew", yaxis_title="apps", xaxis={"dtick": 1})
    return fig


def wait_times(report: dict[str, Any]):
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in report["strategies"]:
        edges, counts = r["wait_s"]["histogram"]["edges"], r["wait_s"]["histogram"]["counts"]
        if not counts:
            continue
        centres = [(a + b) / 2 for a, b in zip(edges, edges[1:], strict=False)]
        widths = [b - a for a, b in zip(edges, edges[1:], strict=False)]
        fig.add_trace(go.Bar(x=centres, y=counts, width=widths, name=r["strategy"], opacity=0.6))
    fig.update_layout(barmode="overlay", height=380, xaxis_title="seconds from submission to placed",
                      yaxis_title="instances", title="Wait-time distribution")
    return fig


CHARTS = {
    "summary-table": summary_table,
    "summary-bars": summary_bars,
    "cell-allocation": cell_allocation,
    "app-zones": app_zones,
    "az-skew": az_skew,
    "wait-times": wait_times,
}


def render_html(report: dict[str, Any]) -> str:
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    divs = []
    for chart_id, build in CHARTS.items():
        fig = build(report)
        chart = pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=chart_id,
                            default_height=f"{fig.layout.height or 450}px", config={"displaylogo": False})
        divs.append(f'<section class="chart">{chart}</section>')
    notes = sorted({n for r in report["strategies"] for n in r.get("notes", [])})
    facts = (
        f"{report['cells']} cells in {len(report['zones'])} zones ({', '.join(report['zones'])}); "
        f"{report['instances']:,} instances of {report['apps']:,} apps and "
        f"{report['tasks']:,} tasks to place; "
        f"{report['prefill_instances']:,} instances running before; transport {report['transport']}, "
        f"engine {report['engine']}, seed {report['seed']}"
    )
    esc = html.escape
    notes_html = "".join(f"<li>{esc(n)}</li>" for n in notes)
    numbers_in = esc(report.get("json_name", "the .json beside this file"))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>vendue simulate: {esc(report["scenario"])}</title>
<style>body{{font-family:system-ui,sans-serif;margin:1.5em;color:#222}} .chart{{margin:1.5em 0}}
p.facts{{color:#444}}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head><body>
<h1>vendue simulate: {esc(report["scenario"])}</h1>
<p>{esc(report.get("description") or "")}</p>
<p class="facts">{esc(facts)}. Generated {esc(report["generated_at"])}; every number is in {numbers_in}.</p>
{f'<ul class="notes">{notes_html}</ul>' if notes_html else ""}
{"".join(divs)}
</body></html>
"""


def write_report(report: dict[str, Any], html_path: Path) -> Path:
    """Write FILE.html and FILE.json; return the JSON's path."""
    html_path = Path(html_path)
    data_path = json_path(html_path)
    data_path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    html_path.write_text(render_html({**report, "json_name": data_path.name}), encoding="utf-8")
    return data_path
