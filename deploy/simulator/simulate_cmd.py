"""`vendue simulate`: run the placement engine on a workload file, compare strategies, or generate one.

    vendue simulate --workload FILE.json --strategy NAME [--engine fast|reference] [--seed S] [--json]
    vendue simulate --scenario NAME | --workload FILE --strategy A,B,... [--transport inproc|http|nats]
                    [--report report.html] [--json]
    vendue simulate --list-scenarios
    vendue simulate --generate NAME [--cells N] [--zones Z] [--instances I] [--seed S] [--out FILE]
    vendue simulate --scenario NAME --out FILE     (the scenario as a workload file)

The first is the workload-format contract (one JSON object, the engine alone). With a scenario, several
strategies, a transport or a report, the auctioneer's own auction code runs against simulated reps
(compare.py) and the output is a report per strategy.

Anything wrong with the input (missing file, invalid JSON, a field out of range, an unknown strategy or
generator, a bad objective expression) is one line on stderr, `error: <field>: <why>`, and exit status 2.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import typer

from ..cli import app
from ..cli_style import USAGE_ERROR, OneLineErrorsCommand, fail
from .workload import WorkloadError, load_workload


@app.command(cls=OneLineErrorsCommand)
def simulate(
    workload: Path | None = typer.Option(None, "--workload", "-w", help="Workload file (JSON) to schedule."),
    scenario: str | None = typer.Option(None, "--scenario", help="A built-in scenario (--list-scenarios)."),
    strategy: str | None = typer.Option(
        None, "--strategy", "-s", help="Placement strategy, or several: diego,dea,binpack (default diego; "
                                       "a scenario's own list)."),
    transport: str | None = typer.Option(
        None, "--transport", "-t", help="inproc (the auctioneer's code, simulated reps in this process), "
                                        "http or nats (a local cluster of `vendue rep --sim` processes)."),
    report: Path | None = typer.Option(None, "--report", help="Write an HTML report here, and its .json."),
    list_scenarios: bool = typer.Option(False, "--list-scenarios", help="List the built-in scenarios."),
    timeout: float = typer.Option(300.0, "--timeout", min=1, help="http/nats: give up waiting after S s."),
    engine: str = typer.Option("fast", "--engine", "-e", help="fast (indexed) or reference (exhaustive)."),
    seed: int = typer.Option(0, "--seed", help="Seed for randomised strategies, generators and scenarios."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a summary."),
    generate_name: str | None = typer.Option(None, "--generate", "-g", help="Write a generated workload."),
    cells: int | None = typer.Option(None, "--cells", min=1, help="Generator: number of cells."),
    zones: int | None = typer.Option(None, "--zones", min=1, help="Generator: number of zones."),
    instances: int | None = typer.Option(None, "--instances", min=0, help="Generator: LRP instances."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Generator or --scenario: the workload file to write (default stdout)."),
    explain: str | None = typer.Option(
        None, "--explain", help="Explain one item's placement: PROCESS_GUID:INDEX or a task guid."),
) -> None:
    """Run the placement engine or the auctioneer on a workload or scenario; or generate a workload file."""
    if list_scenarios:
        print_scenarios()
        return
    if generate_name is not None:
        if workload is not None or scenario is not None:
            fail("--generate and --workload/--scenario: give one or the other", USAGE_ERROR)
        _generate(generate_name, cells, zones, instances, seed, out)
        return
    if scenario is not None and workload is not None:
        fail("--scenario and --workload: give one or the other", USAGE_ERROR)
    if scenario is not None and out is not None:
        _export_scenario(scenario, seed, out)
        return
    if scenario == ZONE_OUTAGE:
        _zone_outage(seed, report, as_json)
        return
    compare_mode = (scenario is not None or transport is not None or report is not None
                    or (strategy is not None and "," in strategy))
    if compare_mode:
        if explain is not None:
            fail("--explain: works on a --workload with one strategy, without --transport or --report",
                 USAGE_ERROR)
        _compare(workload, scenario, strategy, transport or "inproc", report, engine, seed, timeout, as_json)
        return
    if workload is None:
        fail("--workload: required (or --scenario NAME, or --generate NAME to write one)", USAGE_ERROR)
    strategy = strategy or "diego"

    from .engine import explain_item
    from .engine import simulate as run_simulation

    try:
        loaded = _load(workload)
        if explain is not None:
            why = explain_item(loaded, explain, strategy=strategy, seed=seed)
        else:
            result = run_simulation(loaded, strategy=strategy, engine=engine, seed=seed)
    except WorkloadError as exc:
        fail(str(exc), USAGE_ERROR)
    if explain is not None:
        typer.echo(json.dumps(why)) if as_json else print_explanation(why)
    elif as_json:
        typer.echo(json.dumps(result))
    else:
        print_summary(result)


def _load(workload: Path):
    loaded = load_workload(workload)
    if not loaded.name:  # an unnamed workload is reported under its file's name
        loaded = loaded.model_copy(update={"name": workload.stem})
    return loaded


def _strategies(text: str | None, default: tuple[str, ...], engine: str) -> list[str]:
    from .engine import check_strategy

    names = [s.strip() for s in text.split(",")] if text is not None else list(default)
    if not names or any(not s for s in names):
        raise WorkloadError(f"--strategy: expected NAME or NAME,NAME,... got {text!r}")
    if len(set(names)) != len(names):
        raise WorkloadError(f"--strategy: {text!r} names a strategy twice")
    for name in names:
        check_strategy(name, "--strategy", engine)
    return names


def _report_path(report: Path | None) -> None:
    if report is None:
        return
    from .report import json_path, missing_dependency

    if (missing := missing_dependency()) is not None:
        raise WorkloadError(f"--report: {missing}")
    if report.suffix.lower() == ".json" or json_path(report) == report:
        raise WorkloadError(f"--report: {report} would be overwritten by its own .json; name the .html")
    if not report.parent.is_dir():
        raise WorkloadError(f"--report: directory {report.parent} does not exist")


def _compare(workload: Path | None, scenario_name: str | None, strategy: str | None, transport: str,
             report: Path | None, engine: str, seed: int, timeout: float, as_json: bool) -> None:
    from .compare import TRANSPORTS, compare
    from .engine import check_workload
    from .scenarios import scenario as find_scenario
    from .sim_input import from_workload

    try:
        if engine not in ("fast", "reference"):
            raise WorkloadError(f"--engine: unknown engine {engine!r} (expected fast or reference)")
        if transport not in TRANSPORTS:
            raise WorkloadError(f"--transport: unknown transport {transport!r} "
                                f"(expected one of {', '.join(TRANSPORTS)})")
        _report_path(report)
        if scenario_name is not None:
            try:
                found = find_scenario(scenario_name)
            except ValueError as exc:
                raise WorkloadError(f"--scenario: {exc}") from None
            strategies = _strategies(strategy, found.strategies, engine)
            sim = found.build(seed)
            description = found.description
        elif workload is not None:
            strategies = _strategies(strategy, ("diego",), engine)
            loaded = _load(workload)
            check_workload(loaded, strategies[0], engine)
            sim = from_workload(loaded)
            description = f"workload file {workload}"
        else:
            raise WorkloadError("--workload or --scenario: give one (--list-scenarios lists the scenarios)")
        if transport != "inproc":
            from .transport_cluster import plan

            try:
                plan(sim)
            except ValueError as exc:
                raise WorkloadError(str(exc)) from None
    except WorkloadError as exc:
        fail(str(exc), USAGE_ERROR)

    from ..cluster import ClusterError
    from .transport_cluster import ClusterRunError

    try:
        with _progress(enabled=not as_json) as on_progress:
            result = compare(sim, strategies, transport, engine, seed, timeout, description, on_progress)
    except (ClusterError, ClusterRunError) as exc:
        fail(' '.join(str(exc).split())[:500])
    if report is not None:
        from .report import write_report

        data_path = write_report(result, report)
    if as_json:
        typer.echo(json.dumps(result))
    else:
        print_comparison(result)
        if report is not None:
            typer.echo(f"wrote {report} and {data_path}")


@contextlib.contextmanager
def _progress(enabled: bool):
    """A progress bar per strategy on stderr, on a terminal only; yields the callback for compare()."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not (enabled and console.is_terminal),
        transient=False,
    )
    tasks: dict[str, Any] = {}

    def on_progress(strategy: str, done: int, all_: int) -> None:
        if strategy not in tasks:  # a bar (and its clock) per strategy, from when that strategy starts
            tasks[strategy] = progress.add_task(f"{strategy:>10}", total=all_ or 1)
        progress.update(tasks[strategy], completed=done, total=all_ or 1)

    with progress:
        yield on_progress


def _export_scenario(name: str, seed: int, out: Path) -> None:
    from .scenarios import scenario as find_scenario
    from .sim_input import to_workload

    try:
        found = find_scenario(name)
    except ValueError as exc:
        fail(f"--scenario: {exc}", USAGE_ERROR)
    data = to_workload(found.build(seed))
    text = json.dumps(data, separators=(",", ":"))
    try:
        out.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"--out: cannot write {out}: {exc.strerror or exc}", USAGE_ERROR)
    typer.echo(f"wrote {out}: {len(data['cells'])} cells, {len(data['lrps'])} LRP instances, "
               f"{len(data['tasks'])} tasks", err=True)


def print_scenarios() -> None:
    """One line per scenario: name, what it is, the strategies it compares by default."""
    from .scenarios import SCENARIOS

    width = max(len(name) for name in (*SCENARIOS, ZONE_OUTAGE))
    for s in SCENARIOS.values():
        typer.echo(f"{s.name:<{width}}  {s.description} [{','.join(s.strategies)}]")
    typer.echo(f"{ZONE_OUTAGE:<{width}}  A zone's cells leave, everything is evacuated, they return and the "
               "rebalancer runs: zone spread before/during/after, running counts over time [diego]")


# A scenario in phases (deploy/simulator/rebalance.py), not one placement to compare strategies on.
ZONE_OUTAGE = "zone-outage-and-return"


def _zone_outage(seed: int, report: Path | None, as_json: bool) -> None:
    """Run the zone-outage-and-return scenario: the whole report as JSON (`--json`, or `--report FILE`,
    written there), else a summary."""
    from .rebalance import zone_outage_and_return

    result = zone_outage_and_return(seed)
    if report is not None:
        try:
            report.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        except OSError as exc:
            fail(f"--report: cannot write {report}: {exc.strerror or exc}", USAGE_ERROR)
    if as_json:
        typer.echo(json.dumps(result))
        return
    skew, ratio = result["worst_zone_skew"], result["min_running_ratio_while_rebalancing"]
    typer.echo(f"{result['cells']} cells in {result['zones']} zones, {result['apps']} apps, "
               f"{result['instances']} instances")
    typer.echo(f"worst zone skew: before the outage {skew['before']}, during {skew['during']}, "
               f"after the rebalance {skew['after']}")
    typer.echo(f"{len(result['moves'])} moves planned in {result['plan_s']:g}s, carried out in "
               f"{result['execute_s_simulated']:g}s (simulated); lowest running/desired while moving: "
               f"{ratio:g}")
    if report is not None:
        typer.echo(f"wrote {report}")


def print_comparison(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 140))
    console.print(
        f"[bold]{result['scenario']}[/bold]: {result['cells']} cells in {len(result['zones'])} zones, "
        f"{result['instances']:,} instances of {result['apps']:,} apps, {result['tasks']:,} tasks "
        f"({result['prefill_instances']:,} running before); transport [cyan]{result['transport']}[/cyan], "
        f"engine {result['engine']}, seed {result['seed']}"
    )
    table = Table()
    for column in ("strategy", "placed", "failed", "seconds", "rounds", "comms", "cv_memory", "worst AZ skew",
                   "inst/cell min-max", "wait mean / p95 / max s"):
        table.add_column(column, justify="left" if column in ("strategy", "worst AZ skew") else "right")
    for r in result["strategies"]:
        wait = r["wait_s"]
        table.add_row(
            r["strategy"], f"{r['placed']:,}", f"[red]{r['failed']:,}[/red]" if r["failed"] else "0",
            f"{r['seconds']:.3f}", str(r["rounds"]), f"{r['communications']:,}", f"{r['cv_memory']:.4f}",
            f"{r['worst_az_skew']} ({r['worst_az_skew_app'] or '-'})",
            f"{r['min_instances_per_cell']}-{r['max_instances_per_cell']}",
            f"{wait['mean']:.3f} / {wait['p95']:.3f} / {wait['max']:.3f}",
        )
    console.print(table)
    for r in result["strategies"]:
        if r["failures_by_error"]:
            errors = ", ".join(f"{n} {e}" for e, n in r["failures_by_error"].items())
            console.print(f"{r['strategy']} failures: {errors}")
    for note in sorted({n for r in result["strategies"] for n in r["notes"]}):
        console.print(f"[yellow]note[/yellow]: {note}")


def _generate(name: str, cells: int | None, zones: int | None, instances: int | None, seed: int,
              out: Path | None) -> None:
    from .generate import generate

    try:
        data = generate(name, cells=cells, zones=zones, instances=instances, seed=seed)
    except ValueError as exc:
        fail(f"--generate: {exc}", USAGE_ERROR)
    text = json.dumps(data, indent=None, separators=(",", ":"))
    if out is None:
        sys.stdout.write(text + "\n")
        return
    try:
        out.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        fail(f"--out: cannot write {out}: {exc.strerror or exc}", USAGE_ERROR)
    typer.echo(
        f"wrote {out}: {len(data['cells'])} cells, {len(data['lrps'])} LRP instances, {len(data['tasks'])} "
        "tasks",
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
        console.print(
            f"instances per cell: min {min(counts)}, max {max(counts)}, mean {sum(counts) / len(counts):.1f}"
        )
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
    table = Table(
        caption="Diego tries zones with the fewest instances of the process first; lower score wins."
    )
    for column in ("cell", "zone", "in zone", "verdict", "score", *(short.get(n) or n for n in names)):
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
