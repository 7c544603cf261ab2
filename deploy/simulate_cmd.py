"""`vendue simulate`: run the placement engine on a workload file, or generate one.

    vendue simulate --workload FILE.json --strategy NAME [--engine fast|reference] [--seed S] [--json]
    vendue simulate --generate NAME [--cells N] [--zones Z] [--instances I] [--seed S] [--out FILE]

Anything wrong with the input (missing file, invalid JSON, a field out of range, an unknown strategy or
generator, a bad objective expression) is one line on stderr, `error: <field>: <why>`, and exit status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from common.workload import WorkloadError, load_workload

from .cli import app

USAGE_ERROR = 2


def fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(USAGE_ERROR)


@app.command()
def simulate(
    workload: Path | None = typer.Option(None, "--workload", "-w", help="Workload file (JSON) to schedule."),
    strategy: str = typer.Option("diego", "--strategy", "-s", help="Placement strategy for the batch."),
    engine: str = typer.Option("fast", "--engine", "-e", help="fast (indexed) or reference (exhaustive)."),
    seed: int = typer.Option(0, "--seed", help="Seed for randomised strategies and generators."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a summary."),
    generate_name: str | None = typer.Option(None, "--generate", "-g", help="Write a generated workload."),
    cells: int | None = typer.Option(None, "--cells", min=1, help="Generator: number of cells."),
    zones: int | None = typer.Option(None, "--zones", min=1, help="Generator: number of zones."),
    instances: int | None = typer.Option(None, "--instances", min=0, help="Generator: LRP instances."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Generator: file to write (default stdout)."),
    explain: str | None = typer.Option(
        None, "--explain", help="Explain one item's placement: PROCESS_GUID:INDEX or a task guid."),
) -> None:
    """Run the real placement engine on a workload file, or generate a workload file."""
    if generate_name is not None:
        if workload is not None:
            raise fail("--generate and --workload: give one or the other")
        _generate(generate_name, cells, zones, instances, seed, out)
        return
    if workload is None:
        raise fail("--workload: required (or --generate NAME to write one)")

    from .simulate import explain_item
    from .simulate import simulate as run_simulation

    try:
        loaded = load_workload(workload)
        if not loaded.name:  # an unnamed workload is reported under its file's name
            loaded = loaded.model_copy(update={"name": workload.stem})
        if explain is not None:
            why = explain_item(loaded, explain, strategy=strategy, seed=seed)
        else:
            report = run_simulation(loaded, strategy=strategy, engine=engine, seed=seed)
    except WorkloadError as exc:
        raise fail(str(exc)) from None
    if explain is not None:
        typer.echo(json.dumps(why)) if as_json else print_explanation(why)
    elif as_json:
        typer.echo(json.dumps(report))
    else:
        print_summary(report)


def _generate(name: str, cells: int | None, zones: int | None, instances: int | None, seed: int,
              out: Path | None) -> None:
    from .generate import generate

    try:
        data = generate(name, cells=cells, zones=zones, instances=instances, seed=seed)
    except ValueError as exc:
        raise fail(f"--generate: {exc}") from None
    text = json.dumps(data, indent=None, separators=(",", ":"))
    if out is None:
        sys.stdout.write(text + "\n")
        return
    try:
        out.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise fail(f"--out: cannot write {out}: {exc.strerror or exc}") from None
    typer.echo(
        f"wrote {out}: {len(data['cells'])} cells, {len(data['lrps'])} LRP instances, {len(data['tasks'])} tasks",
        err=True,
    )


def print_summary(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"[bold]{report['workload'] or 'workload'}[/bold]: strategy [cyan]{report['strategy']}[/cyan], "
        f"engine {report['engine']}, {report['cells']} cells"
    )
    console.print(
        f"placed [green]{report['placed']}[/green], failed [red]{report['failed']}[/red] "
        f"in {report['seconds']:.4f} s ({report['placements_per_s']:,.0f} placements/s); "
        f"cv_memory {report['cv_memory']:.4f}"
    )
    zones = Table(title="instances per zone (prefill included)")
    zones.add_column("zone")
    zones.add_column("instances", justify="right")
    for zone, n in report["per_zone_instances"].items():
        zones.add_row(zone, str(n))
    console.print(zones)
    counts = list(report["per_cell_instances"].values())
    if counts:
        console.print(f"instances per cell: min {min(counts)}, max {max(counts)}, mean {sum(counts) / len(counts):.1f}")
    if report["failures_by_error"]:
        errors = Table(title="failures")
        errors.add_column("error")
        errors.add_column("count", justify="right")
        for error, n in report["failures_by_error"].items():
            errors.add_row(error, str(n))
        console.print(errors)
        console.print(f"first failure: {report['failures'][0]['error']} — {report['failures'][0]['detail']}")


def print_explanation(why: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 120))
    verdict = f"[green]{why['chosen']}[/green]" if why["chosen"] else f"[red]nowhere[/red]: {why['error']}"
    console.print(f"[bold]{why['item']}[/bold] ({why['strategy']}) → {verdict}")
    if why["detail"]:
        console.print(why["detail"])
    order = ["memory_used", "disk_used", "containers_used", "starting", "same_process", "bin_pack"]
    present = {k for c in why["cells"] for k in c["components"] if k != "score"}
    names = [n for n in order if n in present] + sorted(present - set(order))
    short = {"memory_used": "mem", "disk_used": "disk", "containers_used": "slots", "same_process": "same",
             "bin_pack": "binpack"}
    table = Table(caption="Diego tries zones with the fewest instances of the process first; lower score wins.")
    for column in ("cell", "zone", "in zone", "verdict", "score", *(short.get(n, n) for n in names)):
        table.add_column(column, no_wrap=column in ("cell", "score"))
    ranked = sorted(why["cells"], key=lambda c: (c["rejected_by"] is not None, c["zone_instances"],
                                                 c["components"].get("score", 0.0)))
    for c in ranked:
        parts = c["components"]
        table.add_row(
            c["cell_id"], c["zone"], str(c["zone_instances"]),
            "[green]chosen[/green]" if c["cell_id"] == why["chosen"] else (c["reason"] or "feasible"),
            f"{parts['score']:.4f}" if "score" in parts else "",
            *(f"{parts[n]:.3g}" if n in parts else "" for n in names),
        )
    console.print(table)
