"""The fit, select, report, kernels, tables and serve commands (registered on ``autotuner.cli.app.app``)."""
from __future__ import annotations

import json
import math
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from autotuner.cli.app import (DbOption, DtypesOption, MethodOption, UserError, app, check_output_folder, command, console,
                               how_to_fill, out, output_file, print_json, print_table)
from autotuner.fit.rule import DEFAULT_RULE


@command()
def fit(
    gpu: Annotated[str, typer.Option(help="GPU model whose measurements to fit (h100, ...).")],
    db: DbOption = None,
    dtype: DtypesOption = "all",
    method: MethodOption = "cold",
    rule: Annotated[str, typer.Option(help="Lookup rule: local-regret-clamped (default), local-regret, interp-log or nearest-log.")] = DEFAULT_RULE,
    export: Annotated[Optional[str], typer.Option(help="Also write each table as JSON into this folder.")] = None,
    any_source: Annotated[bool, typer.Option("--any-source", help="Also use rows measured with an older source of a variant (default: current source only).")] = False,
    replace_worse: Annotated[bool, typer.Option("--replace-worse", help="Store a table even where it answers worse, covers less, or moves answers on one source's evidence, than the one answering today.")] = False,
) -> None:
    """Fit dispatch tables from every current measurement of the GPU model (every run, environment and
    uploader, reconciled: conflicts between sources are listed and set aside) and print their
    leave-one-out regret. A table that would answer worse than, cover less than, or move answers on less
    evidence than the one answering today (fitted or shipped) is not stored without --replace-worse; a
    stored table's changed answers are listed with whose evidence moved them."""

    from sqlalchemy.orm import Session

    from autotuner.fit import guard
    from autotuner.fit.fit import FitError, fit_inputs, fit_table
    from autotuner.tune.grid import parse_dtypes
    from autotuner.lookup.gpu import validate_gpu_key
    from autotuner.fit.rule import RULES
    from db.engine import make_engine, missing_sqlite_file, resolve_database_url

    if rule not in RULES:
        raise UserError(f"--rule {rule!r} is not one of {', '.join(RULES)}", code=2)
    key = validate_gpu_key(gpu)
    dtypes = parse_dtypes(dtype)
    folder = check_output_folder(export, "--export") if export else None
    url = resolve_database_url(db)
    if missing_sqlite_file(url):  # nothing measured there: fitting makes no database
        raise UserError(f"no database at {url.removeprefix('sqlite:///')}: nothing to fit; {how_to_fill(key)}", code=2)
    engine = make_engine(url)
    report = Table("gpu", "dtype", "method", "candidates", "shapes", "regret geomean", "p95", "max")
    fitted = refused = 0
    for dt in dtypes:
        label = f"{key}/{dt}/{method}"
        compared: list = []
        with Session(engine, expire_on_commit=False) as session, session.begin():
            today = guard.incumbent(session, key, dt, method)
            try:
                inputs = fit_inputs(session, key, dt, method, any_source=any_source)
            except FitError as exc:
                console.print(f"[yellow]{exc}[/yellow]", highlight=False)
                continue
            for line in inputs.evidence.report(label, guard.SHOWN):
                console.print(f"[yellow]warning:[/yellow] {escape(line)}", highlight=False)
            try:
                document = fit_table(session, key, dt, method, rule=rule, inputs=inputs, accept=lambda d: compared.append(
                    guard.check_replacement(d, today, replace_worse=replace_worse, evidence=inputs.evidence)))
            except guard.WorseTableError as exc:
                console.print(f"[red]refused:[/red] {escape(str(exc))}", highlight=False)
                refused += 1
                continue
        if compared:
            out.print(escape(changed_answers(label, compared[0], inputs.evidence)), highlight=False)
        fitted += 1
        regret = document["regret"]
        report.add_row(key, dt, method, str(len(document["candidates"])), str(len(document["points"])),
                       *(f"{regret[k]:.4f}" if regret[k] is not None else "-" for k in ("geomean", "p95", "max")))
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{key}_{dt}_{method}.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    if not fitted and not refused:
        raise UserError(f"nothing fitted for {key}: run `autotuner sweep --gpu {key}` first")
    if fitted:
        print_table(report)
    if refused:
        raise UserError(f"{refused} table(s) not stored: they would answer worse than, cover less than, or move "
                        f"answers on less evidence than the tables answering today (see above); "
                        f"{guard.REPLACE_FLAG} stores them anyway")


def changed_answers(label: str, comparison, evidence) -> str:  # noqa: ANN001 - guard.Comparison, evidence.Evidence
    """How many answers a stored table moved at measured shapes, by how much, and on whose evidence."""
    changes = comparison.changes
    if not changes:
        return f"{label}: no answer changed at the {comparison.new.shapes} measured shapes"
    ratios = sorted(c.price.ratio for c in changes if c.price is not None and c.price.ratio is not None)
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    by = f"x{geomean:.3f} geomean (x{ratios[0]:.3g} to x{ratios[-1]:.3g})" if ratios else "unpriced"
    sources = {source for change in changes if change.price is not None for source in change.price.sources}
    return (f"{label}: {len(changes)} answer(s) changed at measured shapes, new time / old {by}, on the evidence of "
            f"{evidence.describe_sources(sources) or 'the tables alone'}; first: "
            + "; ".join(map(str, changes[:5])))


# a negative M or N is read as a value (and refused by its range, exit 2), not as an unknown option
@command("select", context_settings={"ignore_unknown_options": True})
def select_command(
    m: Annotated[int, typer.Argument(metavar="M", help="Rows (M >= 0).", min=0)],
    n: Annotated[int, typer.Argument(metavar="N", help="Row length (N >= 1).", min=1)],
    dtype: Annotated[str, typer.Argument(metavar="DTYPE", help="fp32, fp16 or bf16 (aliases accepted).")],
    gpu: Annotated[Optional[str], typer.Option(help="GPU model (default: this machine's).")] = None,
    method: MethodOption = "cold",
    db: DbOption = None,
) -> None:
    """Print the kernel the dispatch tables choose for one shape, as JSON, with the table that answered
    (``table``: shipped or the database's, its fit time and source runs; null for the fallback)."""
    from autotuner.lookup.gpu import current_gpu_key
    from autotuner.report.reports import answering_store, table_origin

    store, from_database = answering_store(db)
    if gpu is None and current_gpu_key() is None:  # the fallback for "no GPU" would answer nothing useful
        raise UserError(f"no GPU found on this host: pass --gpu MODEL (models with a table: {', '.join(store.gpus())})",
                        code=2)
    choice = store.select(m, n, dtype, gpu=gpu, method=method)
    table_gpu = choice.source.removeprefix("nearest-gpu:").split("/")[0] if choice.source.startswith("nearest-gpu:") else choice.gpu
    table = store.get(table_gpu, choice.dtype, method)
    print_json({**choice.as_dict(), "table": table_origin(table, table is not None and table.key in from_database)})


@command()
def report(
    gpu: Annotated[str, typer.Option(help="GPU model whose measurements to report (h100, ...).")],
    db: DbOption = None,
    dtype: DtypesOption = "all",
    method: MethodOption = "cold",
    markdown_file: Annotated[Optional[str], typer.Option("--markdown", help="Also write the per-shape table here.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the shapes and per-dtype figures as JSON instead.")] = False,
) -> None:
    """Per shape: our best kernel against a copy of the same bytes (fraction of speed of light)."""
    from sqlalchemy.orm import Session

    from autotuner.report.bench import markdown, report_document, shape_reports, summary
    from autotuner.tune.grid import parse_dtypes
    from autotuner.lookup.gpu import validate_gpu_key
    from db.engine import reader_engine

    key = validate_gpu_key(gpu)
    target = output_file(markdown_file, "--markdown") if markdown_file else None
    engine = reader_engine(db)
    reports = []
    if engine is not None:
        with Session(engine) as session:
            reports = shape_reports(session, key, method, parse_dtypes(dtype))
        engine.dispose()
    if not reports:
        raise UserError(f"no measurements of {key} with method {method} in this database: {how_to_fill(key)}")
    if target is not None:
        target.write_text(markdown(reports) + "\n")
    if as_json:
        print_json(report_document(key, method, reports))
        return
    table = Table("dtype", "M", "N", "copy us", "best own us", "fraction", "torch us", "best own")
    for r in reports:
        table.add_row(r.dtype, str(r.m), str(r.n), *(f"{v:.2f}" if v else "-" for v in (r.copy_us, r.best_own_us, r.fraction, r.torch_us)),
                      r.best_own or "-")
    print_table(table)
    for dt in sorted({r.dtype for r in reports}):
        figures = summary([r for r in reports if r.dtype == dt])
        out.print(f"{dt}: {figures['shapes']} shapes, geomean {figures['geomean'] or 0:.3f} of copy speed, "
                  f"min {figures['min'] or 0:.3f} ({figures['worst_shape']}), "
                  f"min on >=64MB {figures['big_min'] or 0:.3f} over {figures['big_shapes']} shapes", highlight=False)


@app.command()
def kernels(as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False) -> None:
    """List every registered kernel variant: seed, dtypes, configs, what a GPU needs to run it (compute
    capability, shared memory, cluster), the GPU models that do, and whether it runs here."""
    from autotuner.report.catalog import describe_variants, needs_text

    described = describe_variants()
    if as_json:
        print_json(described)
        return
    table = Table("variant", "seed", "backend", "dtypes", "configs", "min sm", "needs", "runs on", "available")
    for column in table.columns[:6]:  # names whole; the needs, models and reason wrap on a narrow terminal
        column.no_wrap = True
    table.columns[0].min_width = max((len(entry["name"]) for entry in described), default=7)
    for entry in described:
        table.add_row(entry["name"], entry["seed"], entry["backend"], ",".join(entry["dtypes"]), str(len(entry["configs"])),
                      *needs_text(entry), "yes" if entry["available"] else f"no: {entry['reason']}")
    print_table(table)


@command()
def tables(db: DbOption = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False) -> None:
    """List the shipped and fitted dispatch tables with their regret figures, fit time and source runs;
    ``answers`` marks the table that answers its GPU, dtype and method (a database's overlays the shipped)."""
    from autotuner.report.reports import table_listing

    listing = table_listing(db)
    if as_json:
        print_json(listing)
        return
    table = Table("origin", "answers", "gpu", "dtype", "method", "candidates", "shapes", "regret geomean", "p95", "max",
                  "fitted", "runs")
    for row in listing:
        if "error" in row:
            table.add_row(row["origin"], "no", row["error"])
            continue
        runs = row["source_runs"] or []
        table.add_row(row["origin"], "yes" if row["answers"] else "no", row["gpu"], row["dtype"], row["timing_method"],
                      str(row["candidate_count"]), str(row["shape_count"]),
                      *(f"{row[k]:.4f}" if row[k] is not None else "-" for k in ("regret_geomean", "regret_p95", "regret_max")),
                      row["created_at"] or "-", f"{len(runs)}: {min(runs)}..{max(runs)}" if runs else "-")
    print_table(table)


@command("convert-tables")
def convert_tables(files: Annotated[list[str], typer.Argument(help="Table JSON files to convert in place.")]) -> None:
    """Rewrite dispatch table files of an older format in this program's, with their decision index
    (the fit's rule evaluated over the whole domain: about a minute a table on a 2-core CPU)."""
    from pathlib import Path

    from autotuner.fit.index import index_document

    for name in files:
        path = Path(name)
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read dispatch table {path}: {exc}") from None
        if not isinstance(document, dict) or "candidates" not in document or "points" not in document:
            raise UserError(f"{path} is not a dispatch table (no 'candidates' and 'points')")
        converted = index_document(document)
        partial = path.with_name(f".{path.name}.tmp")
        partial.write_text(json.dumps(converted, indent=1, sort_keys=True) + "\n")
        partial.replace(path)
        out.print(f"{path}: format_version {document.get('format_version')} -> {converted['format_version']}",
                  highlight=False)


@command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.", min=1, max=65535)] = 8000,
    db: DbOption = None,
) -> None:
    """Serve /dispatch, /gpus, /tables, /kernels, /measurements and the dispatch-map page over HTTP."""
    from service.config import Settings, SettingsError
    from service.main import run

    try:  # a bad value, a short or shared upload token, a scope naming an unknown GPU, a default GPU without a table
        run(host, port, Settings(database_url=db) if db else Settings())
    except SettingsError as exc:
        raise UserError(str(exc), code=2) from None
