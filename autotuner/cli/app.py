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
    from autotuner.fit.fit import FitError
    from autotuner.lookup.gpu import GpuMismatchError, NoGpuError
    from autotuner.lookup.table import TableFormatError
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
    from autotuner.domain import TIMING_METHODS as METHODS

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
