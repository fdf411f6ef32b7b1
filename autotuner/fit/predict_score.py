"""How good a predicted table is, scored on the CPU from recordings: leave one GPU out.

For each measured GPU: its table predicted from the other GPUs' recordings alone
(``predict_table.predict_document``), asked at every shape that GPU recorded, each pick scored by
that GPU's own measurement there against the fastest candidate measured there (regret, as
``fit.leave_one_out_regret`` scores it; a pick that GPU did not measure at the shape is counted as a
miss, not scored: the H200's sweep left ``cuda_cluster_split`` out of its classic grid).
Beside it, the same shapes answered by the other GPU's table fitted from its own recordings and
copied as is (the kernels the GPU runs), and by ``torch_softmax``; and the model's time error.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from autotuner.fit.fit import Observation, build_document, summarize_regret
from autotuner.fit.perfmodel import PerfModel, fit_model, ratio_summary
from autotuner.fit.predict_table import PREDICTED_MODELS, donor_weight, kernel_limits, predict_document, write_predicted_tables
from autotuner.fit.samples import Sample, load_samples, recording_paths
from autotuner.fit.model import answer_fields
from autotuner.fit.rule import RuleTable
from autotuner.lookup.gpu_models import GPU_MODELS, runnable_candidates
from autotuner.lookup.select import FALLBACK_VARIANT

Shape = tuple[int, int]


def measured_by_shape(samples: Sequence[Sample], gpu: str, dtype: str) -> dict[Shape, dict[tuple[str, str], float]]:
    rows: dict[Shape, dict[tuple[str, str], float]] = {}
    for s in samples:
        if s.gpu == gpu and s.dtype == dtype:
            rows.setdefault((s.m, s.n), {})[s.candidate] = s.median_us
    return rows


def pick_regrets(document: Mapping[str, Any], measured: Mapping[Shape, Mapping[tuple[str, str], float]],
                 gpu: str) -> tuple[list[float], int]:
    """Regret of ``document``'s pick on ``gpu`` at every measured shape where the pick was measured,
    and how many picks were not (a kernel that GPU's sweep left out there: nothing to score it by).
    The pick is the fit's rule among the kernels ``gpu`` runs (``model.answer_fields``), which the
    decision index answers (99.7-99.8 % of shapes alike), without the minutes an index takes to build."""
    table = RuleTable(document)
    usable = runnable_candidates(table.candidates, table.gpu, GPU_MODELS[gpu])
    regrets, misses = [], 0
    for (m, n), times in measured.items():
        candidate = answer_fields(table, m, n, usable)[0]
        if candidate is None:
            key = (FALLBACK_VARIANT, "")
        else:
            chosen = table.candidates[candidate]
            key = (chosen["variant"], chosen["config_key"])
        time = times.get(key)
        if time is None:
            misses += 1
        else:
            regrets.append(time / min(times.values()))
    return regrets, misses


def torch_regrets(measured: Mapping[Shape, Mapping[tuple[str, str], float]]) -> list[float]:
    return [times[(FALLBACK_VARIANT, "")] / min(times.values()) for times in measured.values()
            if (FALLBACK_VARIANT, "") in times]


def measured_document(samples: Sequence[Sample], gpu: str, dtype: str) -> dict[str, Any]:
    """``gpu``'s table fitted from its recordings alone, as ``autotuner fit`` fits it."""
    constraints, requirements = kernel_limits(dtype)
    observations = [Observation(s.variant, s.config_key, dict(s.config), s.m, s.n, s.median_us)
                    for s in samples if s.gpu == gpu and s.dtype == dtype]
    return build_document(observations, constraints, gpu=gpu, gpu_name=gpu, dtype=dtype, timing_method="cold",
                          requirements=requirements, with_index=False)


def leave_one_gpu_out(samples: Sequence[Sample], dtypes: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per held-out GPU and dtype: regret of the predicted table's picks, of the other GPUs' table
    copied, of ``torch_softmax``, and the model's time error (predicted/measured) there, the model
    fitted on the other GPUs alone."""
    gpus = sorted({s.gpu for s in samples if s.gpu in GPU_MODELS})
    scores: dict[str, dict[str, Any]] = {}
    for held_out in gpus:
        others = [s for s in samples if s.gpu != held_out]
        donors = sorted({s.gpu for s in others})
        if not donors:
            continue
        spec = GPU_MODELS[held_out]
        nearest = max(donors, key=lambda g: donor_weight(GPU_MODELS[g], spec))  # the table a copy would come from
        model = fit_model(others, {g: GPU_MODELS[g] for g in donors})
        own = [s for s in samples if s.gpu == held_out]
        per_dtype: dict[str, Any] = {"model_error": model_error(model, own), "from": donors,
                                     "transfer_error": transfer_error(model, others, own)}
        for dtype in dtypes:
            measured = measured_by_shape(samples, held_out, dtype)
            if not measured:
                continue
            predicted, misses = pick_regrets(predict_document(others, spec, dtype, model=model, with_index=False),
                                             measured, held_out)
            copied, copy_misses = pick_regrets(measured_document(others, nearest, dtype), measured, held_out)
            per_dtype[dtype] = {
                "predicted": summarize_regret(predicted, "leave-one-gpu-out", misses),
                "copied": summarize_regret(copied, f"copied from {nearest}", copy_misses),
                "torch": summarize_regret(torch_regrets(measured), "torch_softmax"),
            }
        scores[held_out] = per_dtype
    return scores


def model_error(model: PerfModel, samples: Sequence[Sample]) -> dict[str, Any]:
    """predicted / measured of the model alone (``PerfModel.predict``) on ``samples``."""
    return ratio_summary([model.predict(s.variant, s.config_key, s.dtype, s.m, s.n, s.resources, GPU_MODELS[s.gpu]) / s.median_us
                          for s in samples if (s.variant, s.config_key, s.dtype) in model.candidates])


def transfer_error(model: PerfModel, donors: Sequence[Sample], samples: Sequence[Sample]) -> dict[str, Any]:
    """predicted / measured of each of ``samples`` moved from a donor's time at the same candidate and
    shape (``PerfModel.transfer``), as a predicted table's times are, before the shape's mean ratio."""
    measured = {(s.variant, s.config_key, s.dtype, s.m, s.n): s for s in samples}
    ratios = []
    for donor in donors:
        target = measured.get((donor.variant, donor.config_key, donor.dtype, donor.m, donor.n))
        moved = model.transfer(donor, GPU_MODELS[target.gpu], GPU_MODELS[donor.gpu]) if target else None
        if moved is not None:
            ratios.append(moved / target.median_us)
    return ratio_summary(ratios)


def expected_regret(scores: Mapping[str, Mapping[str, Any]], dtype: str) -> dict[str, Any]:
    """The regret a predicted table of ``dtype`` carries: the worst held-out GPU's geomean, p95 and
    max of the leave-one-GPU-out scores, naming them."""
    held = {gpu: per[dtype]["predicted"] for gpu, per in scores.items() if dtype in per}
    if not held:
        return {"method": "none: fewer than two measured GPUs"}
    worst = max(held.values(), key=lambda r: r["geomean"] or 0.0)
    return {"geomean": worst["geomean"], "p95": worst["p95"], "max": worst["max"],
            "method": "leave-one-gpu-out (expected)", "per_gpu": {g: r["geomean"] for g, r in held.items()}}


def regenerate(root: Path, folder: Path, gpus: Sequence[str] | None = None, dtypes: Sequence[str] = ("bf16", "fp16", "fp32"),
               recordings: Sequence[Path] | None = None) -> tuple[list[Path], dict[str, Any]]:
    """Predicted tables of ``gpus`` (default: ``PREDICTED_MODELS`` without recordings of their own)
    written into ``folder``, from ``recordings`` (default: the committed ones under ``root``), each
    carrying the leave-one-GPU-out regret as its expected regret; returns the files and the scores.
    ``autotuner predict --all`` runs this."""
    samples = load_samples(recordings if recordings is not None else recording_paths(root))
    measured = {s.gpu for s in samples}
    targets = [g for g in PREDICTED_MODELS if g not in measured] if gpus is None else list(gpus)
    scores = leave_one_gpu_out(samples, dtypes)
    model = fit_model(samples, {g: GPU_MODELS[g] for g in measured if g in GPU_MODELS})
    for gpu in scores:
        scores[gpu]["in_sample_error"] = model_error(model, [s for s in samples if s.gpu == gpu])
    written = write_predicted_tables(samples, folder, targets, dtypes, {dt: expected_regret(scores, dt) for dt in dtypes},
                                     model=model)
    return written, scores
