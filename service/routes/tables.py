"""``GET /gpus`` and ``GET /tables/{gpu}/{dtype}``: what the server answers from.

A table is sent as the exact JSON document ``select_kernel`` reads, with a strong ETag (a hash of
those bytes); a client that sends it back in ``If-None-Match`` gets 304 until the table changes.
"""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from fastapi import APIRouter, Header, Path, Query, Response

from autotuner.records.exchange import TIMING_METHODS
from autotuner.lookup.table import DispatchTable
from service.deps import LiveTablesDep
from service.errors import ERROR_RESPONSES, ApiError
from service.params import DTYPE_HELP, DtypeName, canonical_dtype, gpu_key
from service.schemas import ErrorBody, GpuTables, RegretFigures, TableDocument, TableSummary
from service.tables import LiveTables

router = APIRouter(tags=["tables"])


@router.get("/gpus", response_model=list[GpuTables], summary="GPU models with tables, and their tables")
async def gpus(live: LiveTablesDep) -> list[GpuTables]:
    by_gpu: dict[str, list[DispatchTable]] = {}
    for table in live.store.tables():
        by_gpu.setdefault(table.gpu, []).append(table)
    return [
        GpuTables(gpu=gpu, name=tables[0].document.get("gpu_name"), tables=[_summary(live, t) for t in tables])
        for gpu, tables in sorted(by_gpu.items())
    ]


def _summary(live: LiveTables, table: DispatchTable) -> TableSummary:
    regret = table.document.get("regret")
    return TableSummary(
        dtype=table.dtype, timing_method=table.timing_method, rule=table.rule, source=live.source_of(table),
        candidates=len(table.candidates), points=len(table.points),
        regret=RegretFigures.model_validate(regret) if isinstance(regret, dict) else None,
        created_at=str(table.document["created_at"]) if table.document.get("created_at") else None,
        source_runs=_runs(table.document.get("source_runs")), etag=live.encoded(table).etag,
    )


@router.get(
    "/tables/{gpu}/{dtype}",
    response_model=TableDocument,
    responses={200: {"description": "the table document; `X-Table-Source` (database or shipped), "
                                    "`X-Table-Fitted-At` and `X-Table-Source-Runs` say which table answers"},
               304: {"description": "If-None-Match matched: the client's copy is current"},
               404: {"model": ErrorBody, "description": "no such table (body lists the known GPUs)"},
               **ERROR_RESPONSES},
    summary="One dispatch table document, with an ETag",
)
async def table(
    live: LiveTablesDep,
    gpu: Annotated[str, Path(max_length=128, description="GPU model key, e.g. h100")],
    dtype: Annotated[DtypeName, Path(description=DTYPE_HELP)],
    timing_method: Annotated[Literal[TIMING_METHODS], Query()] = "cold",  # type: ignore[valid-type]
    if_none_match: Annotated[Optional[str], Header(max_length=4096)] = None,
) -> Response:
    dtype_key = canonical_dtype(dtype)
    gpu_model = gpu_key(gpu) or ""
    found = live.store.get(gpu_model, dtype_key, timing_method)
    known = live.store.gpus()
    if found is None:
        what = f"GPU {gpu_model!r}" if gpu_model not in known else f"{dtype_key}/{timing_method} on GPU {gpu_model!r}"
        raise ApiError(404, f"no dispatch table for {what}; known GPUs: {', '.join(known) or 'none'}", known_gpus=known)
    encoded = live.encoded(found)
    headers = {"ETag": encoded.etag, "Cache-Control": "no-cache", **origin_headers(live, found)}
    if if_none_match is not None and _matches(if_none_match, encoded.etag):
        return Response(status_code=304, headers=headers)
    return Response(encoded.body, media_type="application/json", headers=headers)


def _runs(value: object) -> list[int] | None:
    return [run for run in value if type(run) is int] if isinstance(value, list) else None


def origin_headers(live: LiveTables, table: DispatchTable) -> dict[str, str]:
    """Which table answers, beside its bytes: ``database`` or ``shipped``, its fit time and source runs."""
    runs = _runs(table.document.get("source_runs")) or []
    return {"X-Table-Source": live.source_of(table), "X-Table-Fitted-At": str(table.document.get("created_at") or "-"),
            "X-Table-Source-Runs": ",".join(map(str, runs)) or "-"}


def _matches(if_none_match: str, etag: str) -> bool:
    """RFC 9110 weak comparison: ``*``, or any listed tag equal to ours with or without ``W/``."""
    tags = [tag.strip() for tag in if_none_match.split(",")]
    return "*" in tags or any(tag.removeprefix("W/") == etag for tag in tags)
