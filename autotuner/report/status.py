"""What ``autotuner status`` reports: per GPU model, the sweep runs, the measurements by status and
whether each current dispatch table is stale; and the shared work list.

A current table is *stale* when what it was fitted from no longer matches what a sweep would measure
now: its environment differs from the newest run's of the same GPU and timing method (a new driver,
CUDA, torch, Triton or CuPy changes timings), or a variant it chooses among has a different source now
than in the runs it was fitted from (the timed code changed), or is no longer registered. Refit with
``autotuner fit`` after a sweep under the new environment or sources.
"""
from __future__ import annotations

from typing import Any, Callable

from sqlalchemy.orm import Session

from db import overview, queries, worklist
from db.models import DispatchTableRow, Environment, SweepRun

VERSION_FIELDS = ("driver", "cuda", "torch", "triton", "cupy", "python")


def current_source_hash(name: str) -> str | None:
    """The variant's source hash now, None when it is not registered here."""
    from kernels import get_variant

    try:
        return get_variant(name).source_hash()
    except KeyError:
        return None


def environment_change(old: Environment | None, new: Environment | None) -> str:
    """``torch 2.11→2.12, driver 570→580``: the versions that differ between two environments."""
    if old is None or new is None:
        return "environment unknown"
    changes = [f"{name} {getattr(old, name) or '-'}→{getattr(new, name) or '-'}"
               for name in VERSION_FIELDS if getattr(old, name) != getattr(new, name)]
    return ", ".join(changes) or f"fingerprint {old.fingerprint[:8]}→{new.fingerprint[:8]}"


def table_environment_id(session: Session, table: DispatchTableRow) -> int | None:
    if table.environment_id is not None:
        return table.environment_id
    runs = queries.list_runs(session, table.source_runs or [])
    return runs[-1].environment_id if runs else None


def stale_reasons(session: Session, table: DispatchTableRow,
                  current_hash: Callable[[str], str | None] = current_source_hash) -> list[str]:
    """Why this table no longer matches the newest measurements and the current kernel sources
    (empty when it does)."""
    reasons = []
    newest = overview.latest_runs(session, table.gpu_model.key, table.timing_method, limit=1)
    fitted_env = table_environment_id(session, table)
    if newest and fitted_env is not None and newest[0].environment_id != fitted_env:
        change = environment_change(session.get(Environment, fitted_env), session.get(Environment, newest[0].environment_id))
        reasons.append(f"newest runs are under another environment ({change})")
    hashes = overview.source_hashes_of_runs(session, table.source_runs or [], table.dtype)
    changed, missing = set(), set()
    for candidate in table.payload.get("candidates", []):
        variant = candidate["variant"]
        now = current_hash(variant)
        if now is None:
            missing.add(variant)
        elif now not in hashes.get(variant, set()):
            changed.add(variant)
    if changed:
        reasons.append(f"kernel source changed since the fit: {', '.join(sorted(changed))}")
    if missing:
        reasons.append(f"variants no longer registered: {', '.join(sorted(missing))}")
    return reasons


def _run_summary(run: SweepRun) -> dict[str, Any]:
    return {"id": run.id, "status": run.status, "timing_method": run.timing_method, "host": run.host,
            "started_at": run.started_at.isoformat(timespec="seconds") if run.started_at else None,
            "finished_at": run.finished_at.isoformat(timespec="seconds") if run.finished_at else None}


def database_status(session: Session, gpu_key: str | None = None,
                    current_hash: Callable[[str], str | None] = current_source_hash) -> dict[str, Any]:
    """Plain data for the status command (and anything else that wants it as JSON)."""
    runs = overview.run_counts_by_gpu(session)
    measurements = overview.measurement_counts_by_gpu(session)
    gpus = [g for g in queries.list_gpus(session) if gpu_key is None or g.key == gpu_key]
    report = []
    for gpu in gpus:
        tables = []
        for table in queries.current_tables(session, gpu.key):
            reasons = stale_reasons(session, table, current_hash)
            tables.append({"dtype": table.dtype, "timing_method": table.timing_method, "table_id": table.id,
                           "created_at": table.created_at.isoformat(timespec="seconds") if table.created_at else None,
                           "stale": bool(reasons), "reasons": reasons})
        report.append({
            "gpu": gpu.key, "name": gpu.name,
            "runs": {"count": sum(runs.get(gpu.key, {}).values()), "by_status": runs.get(gpu.key, {}),
                     "last": [_run_summary(r) for r in overview.latest_runs(session, gpu.key, limit=1)]},
            "measurements": measurements.get(gpu.key, {}),
            "tables": tables,
        })
    claimed = [{"shape": f"{e.m}x{e.n} {e.dtype}", "claimed_by": e.claimed_by, "attempts": e.attempts,
                "lease_expires_at": e.lease_expires_at.isoformat(timespec="seconds") if e.lease_expires_at else None}
               for e in worklist.claimed_entries(session)]
    return {"gpus": report, "work_list": {"by_status": worklist.entry_counts(session), "claimed": claimed}}
