"""A dispatch table for a GPU with no measurements: every recorded time of the measured GPUs moved to
it by the performance model (``autotuner/fit/perfmodel.py``), then fitted as a measured table is
(``fit.build_document``: pruning, the table rule), marked ``"source": "predicted"``, with its decision
index (``autotuner/fit/index.py``) as ``autotuner fit`` writes it, so the lookup reads it as any
format-2 table. Its index holds one view, the target's own kernels: a predicted table answers for its
own GPU only (``autotuner/lookup/select.py``), so no other GPU's view is built.

Which GPUs ship one (``PREDICTED_MODELS``, ``autotuner predict --all``): one model per architecture
the measured GPUs do not cover, the ones issue 33 names (A100 80GB SXM, L4, L40S, RTX 4090, B200);
each file is 0.55-0.97 MB (compact JSON, most of it the index), so not every listed model gets one.

Which candidates: every one recorded on a measured GPU in that dtype whose requirements the target
meets (``gpu_models.runs_on``). Which shapes: every shape a measured GPU recorded, whose input and
output together take at most a quarter of the target's memory. A candidate's time at a shape is the
geometric mean, weighted by the donors' nearness to the target (``donor_weight``), of its times on
each measured GPU that recorded it there, each moved by the model's ratio (``PerfModel.transfer``);
never below the target's copy floor. Each point's ``copy_us`` is that floor (the peak bandwidth's
time), which the lookup's scaling model floors its own predictions with.

The expected regret a predicted table carries is the leave-one-GPU-out score of the same procedure
(``autotuner/fit/predict_score.py``): a measured GPU's table predicted from the others' recordings
alone, its picks scored on that GPU's own measurements.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Container, Iterable, Mapping, Sequence

from autotuner.fit.fit import Observation, build_document
from autotuner.fit.index import index_document
from autotuner.fit.perfmodel import TERMS, PerfModel, copy_floor_us, element_bytes, fit_model
from autotuner.fit.samples import Sample
from autotuner.lookup.gpu_models import GPU_MODELS, GpuSpec, runs_on

PREDICTED_SOURCE = "predicted"
PREDICTED_MODELS = ("a100", "l4", "l40s", "rtx4090", "b200")  # what ``autotuner predict --all`` writes
MEMORY_SHARE = 4  # input + output may take at most 1/4 of the target's memory


def donor_weight(donor: GpuSpec, target: GpuSpec) -> float:
    """How much a donor GPU's times count: exp(-distance), with distance the log ratios of SM count,
    bandwidth and clock, plus 1 for another architecture."""
    distance = (abs(math.log(donor.sm_count / target.sm_count)) + abs(math.log(donor.bandwidth_gbps / target.bandwidth_gbps))
                + abs(math.log(donor.boost_clock_mhz / target.boost_clock_mhz)) + (donor.architecture != target.architecture))
    return math.exp(-distance)


def kernel_limits(dtype: str) -> tuple[Callable[[str, Mapping[str, Any]], dict[str, int]],
                                       Callable[[str, Mapping[str, Any]], dict[str, int]]]:
    """(constraints, requirements) of a (variant, config) on ``dtype``, from the registered variants."""
    from kernels import KernelConfig, get_variant

    def constraints(name: str, config: Mapping[str, Any]) -> dict[str, int]:
        return dict(get_variant(name).constraints(KernelConfig.from_dict(dict(config)), dtype))

    def requirements(name: str, config: Mapping[str, Any]) -> dict[str, int]:
        return dict(get_variant(name).requirements(KernelConfig.from_dict(dict(config)), dtype))

    return constraints, requirements


def candidate_share(donor: GpuSpec, target: GpuSpec) -> float:
    """How much of a candidate's own model ratio moves its time, the rest being the mean ratio of every
    candidate at that shape (``predicted_observations``). Between GPUs of one compute capability,
    0: leave-one-GPU-out on the H100 and H200 recordings picked best with the shape's mean ratio alone
    (regret geomean 1.022 / 1.018 against 1.023 / 1.022 at one half and 1.028 / 1.025 with the
    candidate's own; docs/PREDICTION.md). Across architectures the candidate's own ratio carries what
    the shape's mean cannot, its occupancy under the target's limits: one half (not measured)."""
    return 0.0 if donor.compute_capability == target.compute_capability else 0.5


def predicted_observations(samples: Iterable[Sample], model: PerfModel, target: GpuSpec, dtype: str,
                           requirements: Callable[[str, Mapping[str, Any]], dict[str, int]],
                           shapes: Container[tuple[int, int]] | None = None) -> list[Observation]:
    """Every recorded (candidate, shape) of ``dtype`` the target runs, with its time moved to it; only
    at ``shapes`` where given."""
    configs: dict[tuple[str, str], Mapping[str, Any]] = {}
    runnable: dict[tuple[str, str], bool] = {}
    limit = target.memory_bytes // MEMORY_SHARE if target.memory_bytes else math.inf
    own: list[tuple[Sample, float]] = []  # (sample, log of its model ratio)
    by_shape: dict[tuple[str, int, int], list[float]] = {}
    for sample in samples:
        donor = GPU_MODELS.get(sample.gpu)
        if sample.dtype != dtype or donor is None or sample.gpu == target.key:
            continue
        if shapes is not None and (sample.m, sample.n) not in shapes:
            continue
        if 2 * sample.m * sample.n * element_bytes(dtype) > limit:
            continue
        if sample.candidate not in runnable:
            runnable[sample.candidate] = runs_on(requirements(sample.variant, sample.config), target)
            configs[sample.candidate] = sample.config
        time = model.transfer(sample, target, donor) if runnable[sample.candidate] else None
        if time is not None:
            ratio = math.log(time / sample.median_us)
            own.append((sample, ratio))
            by_shape.setdefault((sample.gpu, sample.m, sample.n), []).append(ratio)
    moved: dict[tuple[str, str, int, int], list[tuple[float, float]]] = {}
    for sample, ratio in own:
        donor = GPU_MODELS[sample.gpu]
        share = candidate_share(donor, target)
        shape_ratios = by_shape[(sample.gpu, sample.m, sample.n)]
        log_time = math.log(sample.median_us) + share * ratio + (1 - share) * sum(shape_ratios) / len(shape_ratios)
        moved.setdefault((*sample.candidate, sample.m, sample.n), []).append((donor_weight(donor, target), log_time))
    observations = []
    for (variant, config_key, m, n), weighted in sorted(moved.items()):
        time = math.exp(sum(w * t for w, t in weighted) / sum(w for w, _ in weighted))
        observations.append(Observation(variant, config_key, dict(configs[(variant, config_key)]), m, n,
                                        max(time, copy_floor_us(m, n, dtype, target))))
    return observations


def predict_document(samples: Sequence[Sample], target: GpuSpec, dtype: str, *, model: PerfModel | None = None,
                     expected_regret: Mapping[str, Any] | None = None, timing_method: str = "cold",
                     with_index: bool = True, shapes: Container[tuple[int, int]] | None = None) -> dict[str, Any]:
    """The predicted table document of ``target`` and ``dtype`` from ``samples`` of other GPUs (at
    ``shapes`` only, where given), with its decision index unless ``with_index`` is off (the
    leave-one-GPU-out score asks the rule itself)."""
    donors = sorted({s.gpu for s in samples if s.gpu != target.key and s.gpu in GPU_MODELS})
    if not donors:
        raise ValueError(f"no recordings of a GPU other than {target.key} to predict from")
    model = model or fit_model([s for s in samples if s.gpu in donors], {g: GPU_MODELS[g] for g in donors})
    constraints, requirements = kernel_limits(dtype)
    observations = predicted_observations(samples, model, target, dtype, requirements, shapes)
    if not observations:
        raise ValueError(f"no recorded {dtype} candidate of {', '.join(donors)} runs on {target.key}")
    shapes = {(o.m, o.n) for o in observations}
    document = build_document(observations, constraints, gpu=target.key, gpu_name=f"{target.key} (predicted)",
                              dtype=dtype, timing_method=timing_method,
                              copy_times={(m, n): copy_floor_us(m, n, dtype, target) for m, n in shapes},
                              requirements=requirements, with_index=False)
    document.update({"source": PREDICTED_SOURCE, "predicted_from": donors,
                     "regret": dict(expected_regret or {"method": "none: not scored"}),
                     "model": {"terms": list(TERMS), "spec": target.source}})
    return index_document(document) if with_index else document


def write_predicted_tables(samples: Sequence[Sample], folder: Path, gpus: Iterable[str], dtypes: Sequence[str],
                           expected_regret: Mapping[str, Mapping[str, Any]], timing_method: str = "cold",
                           model: PerfModel | None = None) -> list[Path]:
    """``predict_document`` for every (GPU, dtype), written as ``<gpu>_<dtype>_<method>.json``; one
    model (``model``, or one fitted on every sample) serves them all."""
    import json

    donors = sorted({s.gpu for s in samples if s.gpu in GPU_MODELS})
    model = model or fit_model(samples, {g: GPU_MODELS[g] for g in donors})
    written = []
    for gpu in gpus:
        for dtype in dtypes:
            document = predict_document(samples, GPU_MODELS[gpu], dtype, model=model,
                                        expected_regret=expected_regret.get(dtype), timing_method=timing_method)
            path = Path(folder) / f"{gpu}_{dtype}_{timing_method}.json"
            # compact: 15 shipped files, 2.2 MB smaller than indented (the repository travels to the GPUs)
            path.write_text(json.dumps(document, separators=(",", ":"), sort_keys=True) + "\n")
            written.append(path)
    return written

