"""The ``autotuner`` command line. Each command is a thin function over library calls; every expected
failure (bad flag value, wrong GPU, unusable database) is one red line and a non-zero exit, no traceback.
"""
from __future__ import annotations

import json
import logging
import sys
import warnings
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional

import typer
from rich.console import Console

from autotuner.domain import TIMING_METHODS


app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Find, store and serve the fastest correct softmax kernel per GPU and shape.")
console = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the width
out = Console()

DbOption = Annotated[Optional[str], typer.Option("--db", help="Database URL or SQLite path (default: $AUTOTUNER_DB or ~/.local/share/softmax-autotuner/tuning.sqlite).")]
DtypesOption = Annotated[str, typer.Option(help="Comma list of fp32, fp16, bf16 (aliases accepted), or 'all'.")]
# Choices are Literal types: Typer checks them (exit 2, "Invalid value for '--method'") and lists them in --help.
TimingMethod = Literal[TIMING_METHODS]  # type: ignore[valid-type] - the tuple of names, spelled once
MethodOption = Annotated[TimingMethod, typer.Option("--method", help="Timing method: cold (L2 flushed), warm, graph.")]


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

    from db.engine import DatabaseError, DatabasePathError

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
        except DatabasePathError as exc:  # a --db path that cannot be: a bad argument
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(2) from None
        except (ValueError, KeyError) as exc:
            console.print(f"[red]error:[/red] {exc.args[0] if exc.args else exc}", highlight=False)
            raise typer.Exit(2) from None
        except (DatabaseError, GpuMismatchError, NoGpuError, FitError, TableFormatError) as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False)
            raise typer.Exit(1) from None
        except OSError as exc:  # a file or folder the command reads or writes: which, and why
            where = f"{exc.filename}: " if exc.filename else ""
            console.print(f"[red]error:[/red] {where}{exc.strerror or exc}", highlight=False)
            raise typer.Exit(1) from None
        except Exception as exc:
            if type(exc).__module__.startswith("sqlalchemy."):  # a server that does not answer, a lock held too long
                reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
                console.print(f"[red]error:[/red] the database failed: {reason}", highlight=False)
                raise typer.Exit(1) from None
            raise

    return wrapper


def command(name: str | None = None, *, on: typer.Typer | None = None,
            context_settings: dict[str, Any] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a command on ``on`` (default ``app``, or a group such as ``db``) with its expected
    errors shown as one line (``friendly``)."""

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        return (on or app).command(name, context_settings=context_settings)(friendly(function))

    return register


def output_file(path: str, option: str) -> Path:
    """A file a command will write, checked before its work starts: not a folder, and in a folder
    that exists (a bad path is a bad argument, exit 2)."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise UserError(f"{option} {path} is a folder; give a file name", code=2)
    if not target.parent.is_dir():
        raise UserError(f"{option} {path}: the folder {target.parent} does not exist", code=2)
    return target


def check_output_folder(path: str, option: str) -> Path:
    """A folder a command will write into (made if missing), checked before its work starts: not a
    file, and under a folder that exists (a bad path is a bad argument, exit 2)."""
    target = Path(path).expanduser()
    existing = next((p for p in (target, *target.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise UserError(f"{option} {path}: {existing} is a file, not a folder", code=2)
    return target


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


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout: highlighted on a terminal, else plain and never wrapped (``| cat``,
    ``| jq`` and scripts parse it)."""
    if out.is_terminal:
        out.print_json(json.dumps(data))
    else:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")


def how_to_fill(gpu: str | None = None) -> str:
    """What to run to get measurements into a fresh database: import the recordings shipped in a
    source checkout (``tests/data/<gpu>_sweep.json.gz``), or sweep on a GPU host."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "tests" / "data"
    gpus = [gpu] if gpu else ["h100", "h200"]
    shipped = [data / f"{g}_sweep.json.gz" for g in gpus if (data / f"{g}_sweep.json.gz").is_file()]
    sweep = f"`autotuner sweep --gpu {gpu or 'GPU'}` on a GPU host"
    if not shipped:
        return f"run {sweep}, or `autotuner import FILE` with an exchange document"
    return "import the shipped recordings with " + " and ".join(
        f"`autotuner import {path}`" for path in shipped) + f" (add --db as here), or run {sweep}"


def print_table(table: Any) -> None:
    """A rich table on stdout: on a terminal at its width; piped or captured, at the table's own width,
    so no name is cut or wrapped at 80 columns."""
    if out.is_terminal:
        out.print(table)
    else:  # Console.print caps a width at the console's, so a wide console of the same stream
        Console(file=out.file, width=10_000, no_color=out.no_color).print(table)


def _show_version(value: bool) -> None:
    if value:
        from autotuner import __version__

        out.print(f"softmax-autotuner {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def main(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log details to stderr.")] = False,
         show_version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                                    help="Print the version and exit.")] = False) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.showwarning = _show_warning


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """A warning as one line on the console (``warning: ...``), not Python's report of the source
    file and line that raised it: the lookup's warnings speak to the command's user."""
    console.print(f"[yellow]warning:[/yellow] {message}", highlight=False)
