"""The fit, select, report, kernels, tables and serve commands (registered on ``autotuner.cli.app.app``)."""
from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table

from autotuner.cli.app import DbOption, DtypesOption, MethodOption, UserError, app, check_method, command, console, how_to_fill, out, print_json, print_table
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
) -> None:
    """Fit dispatch tables from the measurements and print their leave-one-out regret."""
    from pathlib import Path

    from sqlalchemy.orm import Session

    from autotuner.fit.fit import FitError, fit_table
    from autotuner.tune.grid import parse_dtypes
    from autotuner.lookup.gpu import validate_gpu_key
    from autotuner.fit.rule import RULES
    from db.engine import make_engine

    check_method(method)
    if rule not in RULES:
        raise UserError(f"--rule {rule!r} is not one of {', '.join(RULES)}", code=2)
    key = validate_gpu_key(gpu)
    engine = make_engine(db)
    report = Table("gpu", "dtype", "method", "candidates", "shapes", "regret geomean", "p95", "max")
    fitted = 0
    for dt in parse_dtypes(dtype):
        with Session(engine, expire_on_commit=False) as session, session.begin():
            try:
                document = fit_table(session, key, dt, method, rule=rule, any_source=any_source)
            except FitError as exc:
                console.print(f"[yellow]{exc}[/yellow]", highlight=False)
                continue
        fitted += 1
        regret = document["regret"]
        report.add_row(key, dt, method, str(len(document["candidates"])), str(len(document["points"])),
                       *(f"{regret[k]:.4f}" if regret[k] is not None else "-" for k in ("geomean", "p95", "max")))
        if export:
            folder = Path(export)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{key}_{dt}_{method}.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    if not fitted:
        raise UserError(f"nothing fitted for {key}: run `autotuner sweep --gpu {key}` first")
    print_table(report)


@command("select")
def select_command(
    m: Annotated[int, typer.Argument(help="Rows.", min=0)],
    n: Annotated[int, typer.Argument(help="Row length.", min=1)],
    dtype: Annotated[str, typer.Argument(help="fp32, fp16 or bf16 (aliases accepted).")],
    gpu: Annotated[Optional[str], typer.Option(help="GPU model (default: this machine's).")] = None,
    method: MethodOption = "cold",
) -> None:
    """Print the kernel the dispatch tables choose for one shape, as JSON."""
    from autotuner.lookup.select import select_kernel

    check_method(method)
    print_json(select_kernel(m, n, dtype, gpu=gpu, timing_method=method).as_dict())


@command()
def report(
    gpu: Annotated[str, typer.Option(help="GPU model whose measurements to report (h100, ...).")],
    db: DbOption = None,
    dtype: DtypesOption = "all",
    method: MethodOption = "cold",
    markdown_file: Annotated[Optional[str], typer.Option("--markdown", help="Also write the per-shape table here.")] = None,
) -> None:
    """Per shape: our best kernel against a copy of the same bytes (fraction of speed of light)."""
    from pathlib import Path

    from sqlalchemy.orm import Session

    from autotuner.report.bench import markdown, shape_reports, summary
    from autotuner.tune.grid import parse_dtypes
    from autotuner.lookup.gpu import validate_gpu_key
    from db.engine import EmptyDatabaseError, make_engine

    check_method(method)
    key = validate_gpu_key(gpu)
    try:
        with Session(make_engine(db, create=False)) as session:
            reports = shape_reports(session, key, method, parse_dtypes(dtype))
    except EmptyDatabaseError:
        reports = []
    if not reports:
        raise UserError(f"no measurements of {key} with method {method} in this database: {how_to_fill(key)}")
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
    if markdown_file:
        Path(markdown_file).write_text(markdown(reports) + "\n")


@app.command()
def kernels(as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False) -> None:
    """List every registered kernel variant, its seed, dtypes, configs and whether it runs here."""
    from autotuner.report.catalog import describe_variants

    described = describe_variants()
    if as_json:
        print_json(described)
        return
    table = Table("variant", "seed", "backend", "dtypes", "configs", "available")
    for column in table.columns[:5]:  # names whole; only the reason wraps on a narrow terminal
        column.no_wrap = True
    table.columns[0].min_width = max((len(entry["name"]) for entry in described), default=7)
    for entry in described:
        table.add_row(entry["name"], entry["seed"], entry["backend"], ",".join(entry["dtypes"]), str(len(entry["configs"])),
                      "yes" if entry["available"] else f"no: {entry['reason']}")
    print_table(table)


@command()
def tables(db: DbOption = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False) -> None:
    """List the shipped and fitted dispatch tables with their regret figures."""
    from autotuner.report.reports import table_listing

    listing = table_listing(db)
    if as_json:
        print_json(listing)
        return
    table = Table("origin", "gpu", "dtype", "method", "candidates", "shapes", "regret geomean", "p95", "max")
    for row in listing:
        table.add_row(row["origin"], row["gpu"], row["dtype"], row["timing_method"], str(row["candidate_count"]),
                      str(row["shape_count"]), *(f"{row[k]:.4f}" if row[k] is not None else "-"
                                                 for k in ("regret_geomean", "regret_p95", "regret_max")))
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
    from service.config import Settings
    from service.main import run

    settings = Settings(database_url=db) if db else Settings()
    run(host, port, settings)
