"""Listings for the CLI and the service: tables shipped and fitted, with their regret figures, and
which of them answers each GPU, dtype and timing method (the database's current table overlays the
shipped one of the same key, as in ``select_kernel``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from autotuner.lookup.select import TableStore, load_table_file, shipped_table_files
from autotuner.lookup.table import DispatchTable, TableFormatError


def describe_table(table: DispatchTable, origin: str) -> dict[str, Any]:
    regret = table.document.get("regret") or {}
    return {
        "origin": origin, "gpu": table.gpu, "gpu_name": table.document.get("gpu_name"), "dtype": table.dtype,
        "timing_method": table.timing_method, "rule": table.rule, "candidate_count": len(table.candidates),
        "shape_count": len(table.points), "created_at": table.document.get("created_at"),
        "source_runs": table.document.get("source_runs"),
        "regret_geomean": regret.get("geomean"), "regret_p95": regret.get("p95"), "regret_max": regret.get("max"),
    }


def table_listing(db_url: str | None = None) -> list[dict[str, Any]]:
    """Shipped tables, then the database's current ones, each with ``answers``: whether it is the table
    that answers its key. A database named explicitly must exist; the default one is read if it does."""
    from autotuner.records.store import tables_in_database

    listing = []
    for path in shipped_table_files():
        try:
            listing.append(describe_table(load_table_file(path), f"shipped:{Path(path).name}"))
        except TableFormatError as exc:
            listing.append({"origin": f"shipped:{Path(path).name}", "error": str(exc), "answers": False})
    fitted = [describe_table(t, "database") for t in tables_in_database(db_url)]
    overlaid = {(row["gpu"], row["dtype"], row["timing_method"]) for row in fitted}
    for row in listing:
        row.setdefault("answers", (row["gpu"], row["dtype"], row["timing_method"]) not in overlaid)
    for row in fitted:
        row["answers"] = True
    return listing + fitted


def answering_store(db_url: str | None = None) -> tuple[TableStore, frozenset[tuple[str, str, str]]]:
    """The tables ``select_kernel`` would answer from with this database (shipped, overlaid by its
    current tables), and the keys the database's tables answer."""
    from autotuner.records import store

    fitted = store.tables_in_database(db_url)
    return store.answering_store(fitted), frozenset(table.key for table in fitted)


def table_origin(table: DispatchTable | None, from_database: bool) -> dict[str, Any] | None:
    """Which table answered, in the terms ``autotuner tables`` lists: origin, fit time, source runs."""
    if table is None:
        return None
    return {"origin": "database" if from_database else f"shipped:{table.gpu}_{table.dtype}_{table.timing_method}.json",
            "gpu": table.gpu, "dtype": table.dtype, "timing_method": table.timing_method,
            "created_at": table.document.get("created_at"), "source_runs": table.document.get("source_runs")}
