"""Listings for the CLI and the service: tables shipped and fitted, with their regret figures."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from autotuner.lookup.select import load_table_file, shipped_table_files
from autotuner.lookup.table import DispatchTable, TableFormatError


def describe_table(table: DispatchTable, origin: str) -> dict[str, Any]:
    regret = table.document.get("regret") or {}
    return {
        "origin": origin, "gpu": table.gpu, "gpu_name": table.document.get("gpu_name"), "dtype": table.dtype,
        "timing_method": table.timing_method, "rule": table.rule, "candidate_count": len(table.candidates),
        "shape_count": len(table.points), "created_at": table.document.get("created_at"),
        "regret_geomean": regret.get("geomean"), "regret_p95": regret.get("p95"), "regret_max": regret.get("max"),
    }


def table_listing(db_url: str | None = None) -> list[dict[str, Any]]:
    """Shipped tables, then the database's current ones (the database is only read if it exists)."""
    from autotuner.records.store import tables_in_database
    from db.engine import missing_sqlite_file, resolve_database_url

    listing = []
    for path in shipped_table_files():
        try:
            listing.append(describe_table(load_table_file(path), f"shipped:{Path(path).name}"))
        except TableFormatError as exc:
            listing.append({"origin": f"shipped:{Path(path).name}", "error": str(exc)})
    url = resolve_database_url(db_url)
    if missing_sqlite_file(url):
        return listing
    listing.extend(describe_table(t, "database") for t in tables_in_database(url))
    return listing
