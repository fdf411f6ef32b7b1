"""The table after ``autotuner sweep --quick``: a predicted table corrected by the few shapes measured
on the GPU itself.

At a measured (candidate, shape), the measurement itself; the candidates not measured at a measured
shape, their prediction scaled by that shape's geometric mean of measured / predicted (so a bias of
the prediction there does not rank them against measurements); elsewhere the prediction as it was. A
candidate's correction is not carried to other shapes: scaling each candidate's times everywhere by
its mean measured / predicted improved the picks at the measured shapes and worsened them elsewhere
(leave-one-GPU-out replay, H100 from the H200: 1.022 -> 1.023 overall, 1.022 -> 1.024 elsewhere). The result is fitted as any table (``fit.build_document``) and
marked ``"source": "quick-sweep"``: measured where the prediction was least sure, predicted
elsewhere; a full sweep's table replaces it.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from sqlalchemy.orm import Session

from autotuner.fit.fit import Observation, build_document
from autotuner.fit.predict_table import kernel_limits
from autotuner.fit.rule import times_by_shape

QUICK_SOURCE = "quick-sweep"


def label(variant: str, config_key: str) -> str:
    return f"{variant}[{config_key}]"


def predictions_of(document: Mapping[str, Any]) -> dict[tuple[int, int, str], dict[str, float]]:
    """A table document's times per shape (m, n, dtype) and candidate label: what ``QuickStrategy`` reads."""
    dtype = document["dtype"]
    return {(m, n, dtype): {label(*name): t for name, t in times.items()} for (m, n), times in times_by_shape(document).items()}


def observations_of(document: Mapping[str, Any]) -> list[Observation]:
    candidates = document["candidates"]
    return [Observation(c["variant"], c["config_key"], dict(c["config"]), p["m"], p["n"], t)
            for p in document["points"] for c, t in zip(candidates, p["times"]) if t is not None]


def corrected_observations(predicted: Sequence[Observation], measured: Sequence[Observation]) -> list[Observation]:
    """``predicted`` with ``measured`` in place (module docstring): at a measured shape, the candidates
    not measured there scaled by the shape's geometric mean of measured / predicted."""
    predicted_at = {(o.variant, o.config_key, o.m, o.n): o.median_us for o in predicted}
    logs: dict[tuple[int, int], list[float]] = {}
    for o in measured:
        guess = predicted_at.get((o.variant, o.config_key, o.m, o.n))
        if guess:
            logs.setdefault((o.m, o.n), []).append(math.log(o.median_us / guess))
    rows = {}
    for o in predicted:
        shape_logs = logs.get((o.m, o.n))
        factor = math.exp(sum(shape_logs) / len(shape_logs)) if shape_logs else 1.0
        rows[(o.variant, o.config_key, o.m, o.n)] = Observation(o.variant, o.config_key, o.config, o.m, o.n, o.median_us * factor)
    for o in measured:
        rows[(o.variant, o.config_key, o.m, o.n)] = o
    return list(rows.values())


def quick_document(predicted: Mapping[str, Any], measured: Sequence[Observation], *, gpu_name: str = "",
                   source_runs: Sequence[int] = ()) -> dict[str, Any]:
    """The table of ``predicted``'s GPU and dtype after the quick sweep's ``measured`` rows."""
    dtype = predicted["dtype"]
    constraints, requirements = kernel_limits(dtype)
    observations = corrected_observations(observations_of(predicted), measured)
    copies = {(p["m"], p["n"]): p.get("copy_us") for p in predicted["points"]}
    document = build_document(observations, constraints, gpu=predicted["gpu"], gpu_name=gpu_name or predicted["gpu"],
                              dtype=dtype, timing_method=predicted.get("timing_method", "cold"), copy_times=copies,
                              source_runs=source_runs, requirements=requirements)
    document.update({"source": QUICK_SOURCE, "predicted_from": predicted.get("predicted_from", []),
                     "measured_shapes": len({(o.m, o.n) for o in measured}),
                     "regret": {"method": "none: a quick sweep's table, scored by the bench (bench.probes.predicted_picks)"}})
    return document


QUICK_BUDGET_S = 5 * 60  # sweep --quick's default budget


def starting_predictions(gpu_key: str, dtypes: Sequence[str], root: Path = Path(".")) -> dict[str, dict[str, Any]]:
    """The predicted table a quick sweep of ``gpu_key`` starts from, per dtype: the shipped one where
    the GPU has a predicted table, else one predicted now from the committed recordings of the other
    GPUs under ``root`` (a GPU with measured tables, as the H100: what ``bench.probes.predicted_picks``
    scores). Raises ValueError naming what is missing."""
    import json

    from autotuner.fit.predict_table import predict_document
    from autotuner.fit.samples import load_samples, recording_paths
    from autotuner.lookup.gpu_models import GPU_MODELS
    from autotuner.lookup.select import shipped_table_files

    spec = GPU_MODELS.get(gpu_key)
    if spec is None:
        raise ValueError(f"no specs for GPU {gpu_key!r} in autotuner/lookup/gpu_models.py: nothing to predict from")
    shipped = {path.stem: path for path in shipped_table_files()}
    documents: dict[str, dict[str, Any]] = {}
    samples = None
    for dtype in dtypes:
        path = shipped.get(f"{gpu_key}_{dtype}_cold")
        document = json.loads(path.read_text()) if path else None
        if document is None or document.get("source") != "predicted":
            if samples is None:
                paths = [p for p in recording_paths(root) if p.is_file()]
                if not paths:
                    raise ValueError(f"{gpu_key} has measured tables and no recordings are under {root} to predict "
                                     "them from: run from the repository root")
                samples = load_samples(paths)
            document = predict_document(samples, spec, dtype, with_index=False)  # its points are read, not its index
        documents[dtype] = document
    return documents


def refit_after_quick(session: Session, gpu_key: str, predicted: Mapping[str, Any], timing_method: str = "cold",
                      save: bool = True) -> dict[str, Any]:
    """The quick-sweep table of one dtype from the database's measurements of ``gpu_key`` (the fit's
    rows, ``fit.fit_inputs``), stored as the current table of that key when ``save``."""
    from autotuner.fit.fit import fit_inputs
    from db import queries

    inputs = fit_inputs(session, gpu_key, predicted["dtype"], timing_method)
    document = quick_document(predicted, inputs.observations, gpu_name=inputs.gpu.name, source_runs=inputs.runs)
    if save:
        queries.save_table(session, inputs.gpu, predicted["dtype"], timing_method, document, source_runs=inputs.runs,
                           candidate_count=len(document["candidates"]), regret=None, environment_id=inputs.environment_id)
    return document
