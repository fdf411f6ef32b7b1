"""``autotuner export`` / ``autotuner import``: move sweep results between databases as JSON
(the same document the service's ``POST /runs`` accepts)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from autotuner.cli.app import DbOption, UserError, command, out, output_file, print_json


def _open_text(path: Path, mode: str):  # noqa: ANN202 - a text file, gzip-compressed if named *.gz
    return gzip.open(path, mode + "t") if path.suffix == ".gz" else open(path, mode)


@command("export")
def export_command(
    output: Annotated[str, typer.Argument(help="File to write (.json, or .json.gz to compress); '-' for stdout.")],
    db: DbOption = None,
    gpu: Annotated[Optional[str], typer.Option(help="Only runs of this GPU model.")] = None,
    run: Annotated[Optional[list[int]], typer.Option("--run", help="Only these run ids (repeatable).")] = None,
) -> None:
    """Write sweep runs (candidates, measurements, copy references) as an exchange document."""
    from sqlalchemy.orm import Session

    from autotuner.records.exchange import export_runs
    from db.engine import reader_engine

    target = None if output == "-" else output_file(output, "OUTPUT")  # checked before the database is read
    engine = reader_engine(db)
    if engine is None:
        raise UserError("the database is empty: nothing exported")
    with Session(engine) as session:
        document = export_runs(session, run_ids=run, gpu_key=gpu)
    engine.dispose()
    if not document["runs"]:
        raise UserError("no runs matched: nothing exported")
    text = json.dumps(document, default=str)
    if output == "-":
        out.print(text, highlight=False, soft_wrap=True)
        return
    with _open_text(target, "w") as handle:
        handle.write(text)
    out.print(f"exported {len(document['runs'])} run(s) to {output}", highlight=False)


@command("import")
def import_command(
    source: Annotated[str, typer.Argument(help="Exchange document (.json or .json.gz).")],
    db: DbOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was written as a JSON document instead.")] = False,
) -> None:
    """Load an exchange document into the database, all or nothing, and say what it wrote."""
    from sqlalchemy.orm import Session

    from autotuner.records.exchange import import_runs, parse_document
    from db.engine import make_engine

    path = Path(source)
    if not path.is_file():
        raise UserError(f"no such file: {source}", code=2)
    try:
        with _open_text(path, "r") as handle:
            data = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {source}: {exc}") from None
    document = parse_document(data)  # a document that is not one is refused before a database is opened, or made
    with Session(make_engine(db), expire_on_commit=False) as session, session.begin():
        summary = import_runs(session, document)
    if as_json:
        print_json(summary.model_dump(mode="json"))
        return
    out.print(f"imported {summary.runs_created} new run(s), {summary.runs_reused} already here, of "
              f"{', '.join(summary.gpus) or 'no GPU'}: {summary.measurements} measurements, "
              f"{summary.copy_references} copy references, {summary.candidates} candidates (run ids {_id_span(summary.run_ids)})", highlight=False)


def _id_span(ids: list[int]) -> str:
    """``3-9`` for consecutive ids, else the list."""
    if len(ids) > 1 and sorted(ids) == list(range(min(ids), max(ids) + 1)):
        return f"{min(ids)}-{max(ids)}"
    return ", ".join(map(str, ids)) or "none"
