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
from typing import Any, Mapping, Sequence

from autotuner.fit.fit import Observation, build_document
from autotuner.fit.predict_table import kernel_limits

QUICK_SOURCE = "quick-sweep"


def label(variant: str, config_key: str) -> str:
    return f"{variant}[{config_key}]"


def predictions_of(document: Mapping[str, Any]) -> dict[tuple[int, int, str], dict[str, float]]:
    """A table document's times per shape (m, n, dtype) and candidate label: what ``QuickStrategy`` reads."""
    labels = [label(c["variant"], c["config_key"]) for c in document["candidates"]]
    return {(p["m"], p["n"], document["dtype"]): {labels[i]: t for i, t in enumerate(p["times"]) if t is not None}
            for p in document["points"]}


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
