"""Stand-ins for the GPU side, for CPU tests: a replaying measurer and deliberately failing ones.

``ReplayMeasurer`` answers each work item from a table of recorded results (real GPU measurements in
the replay tests); the faulty measurers imitate what a faulting or hanging kernel does to a worker.
``DeterministicMeasurer`` and ``register_fake_variants`` let the real ``autotuner sweep`` command run
on a CPU (``--measurer``/``--setup``, see ``autotuner/cli/sweep.py``).
"""
from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from autotuner.tune.measure import WorkItem, failure
from kernels import all_variants, register_variant
from kernels.base import SUPPORTED, Build, KernelConfig, Support, Variant

ITEM_PAUSE_ENV = "AUTOTUNER_TEST_ITEM_S"  # seconds each fake worker measurement takes


def _pause() -> None:
    seconds = float(os.environ.get(ITEM_PAUSE_ENV) or 0)
    if seconds > 0:
        time.sleep(seconds)


class ReplayMeasurer:
    def __init__(self, recorded: dict[tuple, dict[str, Any]] | None = None):
        self.recorded = recorded or {}
        self.calls: list[WorkItem] = []

    def measure(self, item: WorkItem) -> dict[str, Any]:
        self.calls.append(item)
        key = item.identity
        if key in self.recorded:
            return dict(self.recorded[key])
        return failure("launch_error", f"nothing recorded for {key}")


class FaultyMeasurer:
    """Worker-side measurer whose behaviour depends on the variant name:
    ``segfault`` kills the process, ``hang`` never answers, ``fatal`` reports a poisoned context,
    anything else returns a fixed ok timing tagged with the worker's pid."""

    def __init__(self, method: str, time_cap_s: float = 0.5):
        self.method = method

    def measure(self, item: WorkItem) -> dict[str, Any]:
        _pause()
        if item.variant == "segfault":
            os._exit(139)
        if item.variant == "hang":
            time.sleep(3600)
        if item.variant == "fatal":
            return failure("fault", "CUDA error: an illegal memory access was encountered", fatal=True)
        return {"status": "ok", "median_us": 10.0 + item.n / 1000, "p20_us": 9.9, "p80_us": 10.1,
                "repetitions": 20, "error": f"pid={os.getpid()}"}


class FakeRows(Variant):
    """A test variant: two configs, the smaller only up to N = 4096. Never built: fake measurers answer."""

    name, backend, seed = "fake_rows", "test", "test"

    def available(self) -> Support:  # fake measurers answer: any host, GPU or not
        return SUPPORTED

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(block=128), KernelConfig.of(block=256)]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {"n_max": 4096} if config["block"] == 128 else {}

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        raise AssertionError("fake variants are never built")


class FakeSplit(FakeRows):
    name = "fake_split"

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig.of(split=2), KernelConfig.of(split=4)]

    def constraints(self, config: KernelConfig, dtype: str) -> dict[str, int]:
        return {}


def register_fake_variants() -> None:
    """Setup hook (``--setup tests.autotuner.fakes:register_fake_variants``); idempotent."""
    known = {v.name for v in all_variants()}
    for variant in (FakeRows(), FakeSplit()):
        if variant.name not in known:
            register_variant(variant)


def deterministic_result(item: WorkItem) -> dict[str, Any]:
    """A result that depends on the item only, so two sweeps of one grid store identical rows; one
    config fails verification on bf16 (failure rows must survive resume too)."""
    if item.config_key == "split=4" and item.dtype == "bf16":
        return failure("wrong", "3 element(s) outside tolerance")
    digest = hashlib.sha256(repr(item.identity).encode()).digest()
    jitter = 1 + digest[0] / 2550  # up to 10 %
    base = 2.0 + item.m * item.n * (4 if item.dtype == "fp32" else 2) / 3e6
    factor = 1.0 if item.kind == "copy" else {"block=128": 1.4, "block=256": 1.2, "split=2": 1.3, "split=4": 1.1}[item.config_key]
    median = round(base * factor * jitter, 4)
    return {"status": "ok", "median_us": median, "p20_us": round(median * 0.98, 4), "p80_us": round(median * 1.03, 4),
            "repetitions": 20, "registers": 32 if item.kind == "candidate" else None}


class DeterministicMeasurer:
    """Worker-side measurer (``--measurer tests.autotuner.fakes:DeterministicMeasurer``)."""

    def __init__(self, method: str, time_cap_s: float = 0.5):
        self.method = method

    def measure(self, item: WorkItem) -> dict[str, Any]:
        _pause()
        return deterministic_result(item)


def every_variant_available() -> None:
    """Setup hook (``--setup tests.autotuner.fakes:every_variant_available``): every registered variant
    reports itself available, so a sweep on a CPU plans the real kernels (a fake measurer times them)."""
    for variant in all_variants():
        type(variant).available = lambda self: SUPPORTED


class AnyCandidateMeasurer:
    """Worker-side measurer for any variant: a time from the shape's bytes and a hash of the item
    (up to 1.6x), the same for the same item."""

    def __init__(self, method: str, time_cap_s: float = 0.5):
        self.method = method

    def measure(self, item: WorkItem) -> dict[str, Any]:
        digest = hashlib.sha256(repr(item.identity).encode()).digest()
        base = 2.0 + item.m * item.n * (4 if item.dtype == "fp32" else 2) / 1.5e6
        median = round(base * (1.0 if item.kind == "copy" else 1 + digest[0] / 425), 4)
        return {"status": "ok", "median_us": median, "p20_us": median, "p80_us": median, "repetitions": 20}


class RecordingMeasurer:
    """Worker-side measurer (``--measurer tests.autotuner.fakes:RecordingMeasurer``) that answers a
    candidate at a shape with the classic H100 recording's newest time for it, as a second measurement
    would: 0-2 % slower (fixed per item), never the same to the bit; anything not recorded fails to launch."""

    def __init__(self, method: str, time_cap_s: float = 0.5):
        import gzip
        import json
        from pathlib import Path

        with gzip.open(Path(__file__).resolve().parents[1] / "data" / "h100_sweep.json.gz", "rt") as handle:
            runs = json.load(handle)["runs"]
        self.recorded: dict[tuple, dict[str, Any]] = {}
        for run in runs:
            for row in run["measurements"]:
                if row["status"] == "ok":
                    candidate = run["candidates"][row["candidate"]]
                    self.recorded[("candidate", row["m"], row["n"], row["dtype"], candidate["variant"],
                                   candidate["config_key"])] = row

    def measure(self, item: WorkItem) -> dict[str, Any]:
        row = self.recorded.get(item.identity)
        if row is None:
            return failure("launch_error", f"nothing recorded for {item.identity}")
        factor = 1 + hashlib.sha256(repr(item.identity).encode()).digest()[0] / 255 * 0.02 + 1e-4
        return {"status": "ok", "median_us": row["median_us"] * factor, "p20_us": row["p20_us"] * factor,
                "p80_us": row["p80_us"] * factor, "repetitions": row["repetitions"]}
