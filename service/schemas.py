"""Wire models of the HTTP API. Separate from the ORM tables (``db/models.py``): the database may grow
columns without the API changing, and the reverse. The upload body is the exchange document of
``autotuner/records/exchange.py``, shared with the CLI."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from autotuner.domain import MAX_DIM, TIMING_METHODS
from autotuner.records.exchange import as_utc
from service.params import DTYPE_HELP, DtypeName

ConfigValue = int | float | str | bool


# SQLite hands times back without a zone; they were stored in UTC, and RFC 3339 needs the offset.
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


class ErrorBody(BaseModel):
    """Every error the API returns: ``message`` says what was wrong in words, ``detail`` carries the
    machine-readable particulars (for 422: pydantic's list of errors, each with ``loc`` and ``msg``)."""

    message: str
    detail: Any = None
    known_gpus: Optional[list[str]] = Field(default=None, description="on 404 for a GPU: the GPUs with tables")


class DispatchQuery(BaseModel):
    """The parameters of ``GET /dispatch``. One model for both ways a request is answered (the route,
    and the fast path in ``service/fast_dispatch.py``), so the two cannot accept different things.
    The configured ``AUTOTUNER_MAX_M`` / ``MAX_N`` (at most these ceilings) are applied after it."""

    m: int = Field(ge=0, le=MAX_DIM, description="rows (0: nothing is launched; the answer is M = 1's, predicted 0 µs); at most AUTOTUNER_MAX_M (default 2**31-1)")
    n: int = Field(ge=1, le=MAX_DIM, description="row length; at most AUTOTUNER_MAX_N (default 2**31-1)")
    dtype: DtypeName = Field(description=DTYPE_HELP)
    gpu: Optional[str] = Field(default=None, max_length=128,
                               description="GPU model key (h100) or device name; default AUTOTUNER_DEFAULT_GPU")
    timing_method: Literal[TIMING_METHODS] = Field(  # type: ignore[valid-type]
        default="cold", description="which table: cold or warm L2, or CUDA graph")


class DispatchAnswer(BaseModel):
    m: int
    n: int
    dtype: str = Field(description="canonical dtype: fp32, fp16 or bf16")
    gpu: str
    timing_method: str
    variant: str
    config: dict[str, ConfigValue]
    config_key: str
    predicted_us: Optional[float] = Field(description="the table's predicted median time; null for the fallback")
    source: str = Field(description="'table', or 'fallback' (torch_softmax) when no candidate admits the shape")
    exact: bool = Field(description="the shape itself was measured")


class RegretFigures(BaseModel):
    model_config = ConfigDict(extra="allow")

    geomean: Optional[float] = None
    p95: Optional[float] = None
    max: Optional[float] = None


class TableSummary(BaseModel):
    dtype: str
    timing_method: str
    rule: str
    source: Literal["database", "shipped"] = Field(description="which table answers: the database's current "
                                                               "fitted one, or the package's shipped one")
    candidates: int
    points: int
    regret: Optional[RegretFigures] = None
    created_at: Optional[str] = Field(default=None, description="when the table was fitted")
    source_runs: Optional[list[int]] = Field(default=None, description="the sweep runs it was fitted from "
                                             "(ids in the database that fitted it)")
    etag: str


class GpuTables(BaseModel):
    gpu: str
    name: Optional[str] = Field(description="the device name the table was measured on")
    tables: list[TableSummary]


class TableDocument(BaseModel):
    """A dispatch table as ``autotuner/lookup/table.py`` defines it (more fields may be present)."""

    model_config = ConfigDict(extra="allow")

    format_version: int
    gpu: str
    dtype: str
    timing_method: Optional[str] = None
    rule: Optional[str] = None
    candidates: list[dict[str, Any]]
    points: list[dict[str, Any]]
    regret: Optional[RegretFigures] = None


class KernelNeeds(BaseModel):
    min_arch: int = Field(description="oldest compute capability x 10 (90: sm_90) any config runs on")
    smem_per_block_max: Optional[int] = Field(description="bytes of shared memory one block asks for, most "
                                                          "demanding config; null: static shared memory only")
    smem_per_block_min: Optional[int] = Field(description="the same, least demanding config")
    cluster_sizes: list[int] = Field(description="thread-block cluster sizes its configs use (sm_90+)")


class KernelInfo(BaseModel):
    name: str
    seed: str
    backend: str
    description: str
    dtypes: list[str]
    configs: list[dict[str, Any]]
    available: Optional[bool] = Field(description="null: not checked (the server need not have a GPU)")
    reason: str
    needs: Optional[KernelNeeds] = Field(description="what a GPU needs to run the variant's configs; null: "
                                                     "unknown (the variant's module could not be imported)")
    runs_on: list[str] = Field(description="GPU models of the lookup's list that run at least one config")
    runs_every_config_on: list[str] = Field(description="GPU models of the lookup's list that run every config")


class MeasurementOut(BaseModel):
    id: int
    run_id: int
    gpu: str
    timing_method: str
    variant: str
    config_key: str
    config: dict[str, Any]
    source_hash: str
    m: int
    n: int
    dtype: str
    status: str
    median_us: Optional[float] = None
    p20_us: Optional[float] = None
    p80_us: Optional[float] = None
    repetitions: Optional[int] = None
    gbps: Optional[float] = None
    registers: Optional[int] = None
    spill_bytes: Optional[int] = None
    static_smem: Optional[int] = None
    dynamic_smem: Optional[int] = None
    threads_per_block: Optional[int] = None
    blocks_per_sm: Optional[int] = None
    occupancy: Optional[float] = None
    max_rel_error: Optional[float] = None
    compile_seconds: Optional[float] = None
    error: Optional[str] = Field(default=None, description="the failure's text, cut to 2,000 characters")
    error_chars: Optional[int] = Field(default=None, description="length of the whole stored error text")
    created_at: Optional[UtcDatetime] = None


class MeasurementPage(BaseModel):
    total: int = Field(description="rows matching the filters, over all pages")
    limit: int
    offset: int
    items: list[MeasurementOut]
    next_offset: Optional[int] = Field(default=None, description="offset of the next page; null on the last page. "
                                       "May be less than offset + limit: a page stops at about 1 MiB of items")


class DatabaseHealth(BaseModel):
    reachable: bool
    backend: str = Field(description="the database's kind: sqlite or postgresql")
    url: Optional[str] = Field(default=None, description="the database URL, password hidden; only with the upload token")
    error: Optional[str] = None


class TablesHealth(BaseModel):
    count: int
    from_database: int
    shipped: int
    generation: int = Field(description="grows each time the tables are reloaded")
    loaded_at: Optional[UtcDatetime] = None
    last_error: Optional[str] = Field(default=None, description="why the last reload failed, if it did")


class FastPathHealth(BaseModel):
    entries: int = Field(description="/dispatch answers held for replay")
    hits: int = Field(description="requests answered by replaying one, since start")
    answers: int = Field(description="requests answered by the fast path's own lookup, since start")


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(description="'degraded': the database cannot be reached")
    database: DatabaseHealth
    tables: TablesHealth
    dispatch_fast_path: FastPathHealth
