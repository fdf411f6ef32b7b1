"""The ``autotuner`` command line. Each command is a thin function over library calls; every expected
failure (bad flag value, wrong GPU, unusable database) is one red line and a non-zero exit, no traceback.
"""
from __future__ import annotations

import json
import logging
from functools import wraps
from typing import Annotated, Any, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from autotuner.table import DEFAULT_RULE

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find, store and serve the fastest correct softmax kernel per GPU and shape.")
console = Console(stderr=True)
out = Console()

DbOption = Annotated[Optional[str], typer.Option("--db", help="Database URL or SQLite path (default: $AUTOTUNER_DB or ~/.local/share/softmax-autotuner/tuning.sqlite).")]
DtypesOption = Annotated[str, typer.Option(help="Comma list of fp32, fp16, bf16 (aliases accepted), or 'all'.")]
MethodOption = Annotated[str, typer.Option("--method", help="Timing method: cold (L2 flushed), warm, graph.")]


class UserError(Exception):
    """An error to show as one line, exit code 2 for bad arguments and 1 otherwise."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def friendly(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's expected errors into a one-line message and an exit code."""
    from autotuner.fit import FitError
    from autotuner.gpu import GpuMismatchError, NoGpuError
    from autotuner.table import TableFormatError
    from pydantic import ValidationError

    from db.engine import DatabaseError

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except UserError as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(exc.code) from None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in exc.errors()[:3])
            more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
            console.print(f"[red]error:[/red] invalid document, {exc.error_count()} problem(s): {problems}{more}", highlight=False)
            raise typer.Exit(1) from None
        except (ValueError, KeyError) as exc:
            console.print(f"[red]error:[/red] {exc.args[0] if exc.args else exc}", highlight=False)
            raise typer.Exit(2) from None
        except (DatabaseError, GpuMismatchError, NoGpuError, FitError, TableFormatError) as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from None

    return wrapper


def check_method(method: str) -> str:
    from autotuner.timing import METHODS

    if method not in METHODS:
        raise UserError(f"--method {method!r} is not one of {', '.join(METHODS)}", code=2)
    return method


def parse_duration(text: str) -> float:
    """``90s``, ``10m``, ``1.5h`` or plain seconds → seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    value = text.strip().lower()
    scale = units.get(value[-1:], None)
    number = value[:-1] if scale else value
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise UserError(f"--budget {text!r} is not a duration (expected e.g. 90s, 10m, 1h)", code=2) from None
    if seconds <= 0:
        raise UserError(f"--budget {text!r} must be positive", code=2)
    return seconds


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log details to stderr.")] = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


@app.command()
@friendly
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

    from autotuner.fit import FitError, fit_table
    from autotuner.grid import parse_dtypes
    from autotuner.gpu import validate_gpu_key
    from autotuner.table import RULES
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
    out.print(report)


@app.command("select")
@friendly
def select_command(
    m: Annotated[int, typer.Argument(help="Rows.", min=0)],
    n: Annotated[int, typer.Argument(help="Row length.", min=1)],
    dtype: Annotated[str, typer.Argument(help="fp32, fp16 or bf16 (aliases accepted).")],
    gpu: Annotated[Optional[str], typer.Option(help="GPU model (default: this machine's).")] = None,
    method: MethodOption = "cold",
) -> None:
    """Print the kernel the dispatch tables choose for one shape, as JSON."""
    from autotuner.select import select_kernel

    check_method(method)
    out.print_json(json.dumps(select_kernel(m, n, dtype, gpu=gpu, timing_method=method).as_dict()))


@app.command()
@friendly
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

    from autotuner.bench import markdown, shape_reports, summary
    from autotuner.grid import parse_dtypes
    from autotuner.gpu import validate_gpu_key
    from db.engine import make_engine

    check_method(method)
    key = validate_gpu_key(gpu)
    with Session(make_engine(db, create=False)) as session:
        reports = shape_reports(session, key, method, parse_dtypes(dtype))
    if not reports:
        raise UserError(f"no measurements of {key} with method {method} in this database")
    table = Table("dtype", "M", "N", "copy us", "best own us", "fraction", "torch us", "best own")
    for r in reports:
        table.add_row(r.dtype, str(r.m), str(r.n), *(f"{v:.2f}" if v else "-" for v in (r.copy_us, r.best_own_us, r.fraction, r.torch_us)),
                      r.best_own or "-")
    out.print(table)
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
    from autotuner.catalog import describe_variants

    described = describe_variants()
    if as_json:
        out.print_json(json.dumps(described))
        return
    table = Table("variant", "seed", "backend", "dtypes", "configs", "available")
    for entry in described:
        table.add_row(entry["name"], entry["seed"], entry["backend"], ",".join(entry["dtypes"]), str(len(entry["configs"])),
                      "yes" if entry["available"] else f"no: {entry['reason']}")
    out.print(table)


@app.command()
@friendly
def tables(db: DbOption = None,
           as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False) -> None:
    """List the shipped and fitted dispatch tables with their regret figures."""
    from autotuner.reports import table_listing

    listing = table_listing(db)
    if as_json:
        out.print_json(json.dumps(listing))
        return
    table = Table("origin", "gpu", "dtype", "method", "candidates", "shapes", "regret geomean", "p95", "max")
    for row in listing:
        table.add_row(row["origin"], row["gpu"], row["dtype"], row["timing_method"], str(row["candidate_count"]),
                      str(row["shape_count"]), *(f"{row[k]:.4f}" if row[k] is not None else "-"
                                                 for k in ("regret_geomean", "regret_p95", "regret_max")))
    out.print(table)


@app.command()
@friendly
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


from autotuner import cli_sweep  # noqa: E402,F401 - registers the sweep and status commands
from autotuner import cli_evaluate  # noqa: E402,F401 - registers the evaluate and bench commands
from autotuner import cli_exchange  # noqa: E402,F401 - registers export and import
from autotuner import cli_db  # noqa: E402,F401 - registers db upgrade and db current
