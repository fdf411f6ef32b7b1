"""``autotuner predict``: dispatch tables for GPU models never measured, predicted from every recording
(``autotuner/fit/predict_table.py``)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from autotuner.cli.app import DtypesOption, UserError, command, print_table
from autotuner.cli.app import out as stdout

SHIPPED_FOLDER = "autotuner/tables"


def default_folder() -> Path:
    """Where predicted tables go unless ``--out`` says otherwise: ``predicted/`` in the data folder the
    default database lives in, never the tracked ``autotuner/tables`` (rewriting the shipped tables is
    a maintainer's explicit ``--out autotuner/tables``)."""
    from db.location import default_database_path

    return default_database_path().parent / "predicted"


@command()
def predict(
    gpu: Annotated[Optional[list[str]], typer.Option(help="GPU model to predict a table for (repeatable): any model gpu_models lists.")] = None,
    all_models: Annotated[bool, typer.Option("--all", help="The shipped models (a100, l4, l40s, rtx4090, b200: PREDICTED_MODELS).")] = False,
    dtype: DtypesOption = "all",
    out: Annotated[Optional[str], typer.Option(help="Folder the tables are written to (<gpu>_<dtype>_cold.json); default: "
                                                    "predicted/ beside the default database. `--out autotuner/tables` "
                                                    "(from the repository root) rewrites the shipped tables.")] = None,
    recording: Annotated[Optional[list[str]], typer.Option(help="`autotuner export` recordings to predict from (repeatable; default: the committed ones).")] = None,
    root: Annotated[str, typer.Option(help="Repository root the default recordings are read under.")] = ".",
) -> None:
    """Write predicted tables (source "predicted", with the leave-one-GPU-out regret as expected regret)."""
    from autotuner.fit.predict_score import regenerate
    from autotuner.fit.samples import RecordingError, recording_paths
    from autotuner.lookup.gpu import validate_gpu_key
    from autotuner.lookup.gpu_models import GPU_MODELS
    from autotuner.tune.grid import parse_dtypes

    if bool(gpu) == all_models:
        raise UserError("give --gpu MODEL (repeatable) or --all", code=2)
    keys = [validate_gpu_key(g) for g in gpu or ()]
    unknown = [k for k in keys if k not in GPU_MODELS]
    if unknown:
        raise UserError(f"no specs for {', '.join(unknown)}; listed models: {', '.join(GPU_MODELS)} "
                        "(autotuner/lookup/gpu_models.py)", code=2)
    paths = [Path(p) for p in recording] if recording else recording_paths(Path(root))
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise UserError(f"recording not found: {', '.join(missing)} (run from the repository root or pass --root)", code=2)
    folder = Path(out) if out else default_folder()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        written, scores = regenerate(Path(root), folder, keys or None, parse_dtypes(dtype), paths)
    except (RecordingError, ValueError) as exc:
        raise UserError(str(exc)) from None
    report = Table("held-out gpu", "dtype", "predicted regret", "copied", "torch_softmax", "misses")
    for held_out, per_dtype in scores.items():
        for dt, score in per_dtype.items():
            if isinstance(score, dict) and "predicted" in score:  # the dtypes' entries
                report.add_row(held_out, dt, *(f"{score[k]['geomean']:.4f}" for k in ("predicted", "copied", "torch")),
                               str(score["predicted"]["misses"]))
    print_table(report)
    errors = Table("gpu", "time predicted/measured", "bias", "size", "p90", "count")
    for gpu, per_dtype in scores.items():
        for what, key in (("in sample", "in_sample_error"), (f"model from {', '.join(per_dtype['from'])}", "model_error"),
                          (f"moved from {', '.join(per_dtype['from'])}", "transfer_error")):
            error = per_dtype[key]
            errors.add_row(gpu, what, *(f"{error[k]}" for k in ("geomean", "abs_geomean", "p90", "count")))
    print_table(errors)
    print_table(_files(written))
    if not out:
        stdout.print(f"Written to {folder}, which no lookup reads: compare them there, or pass "
                            f"--out {SHIPPED_FOLDER} (repository root) to rewrite the shipped tables.", highlight=False)


def _files(paths: list[Path]) -> Table:
    table = Table("written")
    for path in paths:
        table.add_row(str(path))
    return table
