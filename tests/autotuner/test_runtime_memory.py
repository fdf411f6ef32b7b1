"""Bounded memory: 100,000 random new shapes through softmax()'s CUDA path (a fake native module and
fake kernel instances on the CPU, the real lookup of the shipped H100 tables) leave its caches no
larger than the kernel instances the tables hold and the bounded memo of recent shapes."""
from __future__ import annotations

import math
import random
import types

import torch

from autotuner import runtime
from autotuner.lookup.select import default_store
from kernels.base import SUPPORTED

SHAPES = 100_000


class FakeVariant:
    def __init__(self, name, built):
        self.name, self.built = name, built

    def available(self):
        return SUPPORTED

    def constraints(self, config, dtype):
        return {}

    def build(self, config, dtype, n):
        self.built.append((self.name, config.key, dtype))
        return types.SimpleNamespace(
            launch=None, stream_bound=False, native_guard=None,
            native=lambda device, stream, m, n: ((0xF00, (m, 1, 1), (128, 1, 1), 0, bytes(32), (0,), (1,)),))


class Module:
    def make_plan(self, launches):
        return launches

    def run(self, x, stream, plan):
        return x  # no output allocated: 100,000 shapes stay cheap


def log_uniform(rng: random.Random, top: int) -> int:
    return max(1, int(math.exp(rng.uniform(0.0, math.log(top)))))


def test_caches_stay_bounded_by_the_kernel_instances_over_100000_new_shapes(monkeypatch):
    import kernels

    built: list = []
    module = Module()
    monkeypatch.setattr(kernels, "get_variant", lambda name: FakeVariant(name, built))
    monkeypatch.setattr(runtime, "_builds", {})
    monkeypatch.setattr(runtime, "_recent", {})
    monkeypatch.setattr(runtime, "_gpu_keys", {-1: "h100"})
    monkeypatch.setattr(runtime, "_current_device", lambda: -1)
    monkeypatch.setattr(runtime, "_raw_stream", lambda index: 0)
    monkeypatch.setattr(runtime, "native_module", lambda: module)
    monkeypatch.setattr(runtime, "_module_loaded", None)
    monkeypatch.setattr(runtime, "_native_run", module.run)
    rng = random.Random(29)
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    seen = set()
    for _ in range(SHAPES):
        m, n, dtype = log_uniform(rng, 1 << 20), log_uniform(rng, 1 << 20), rng.choice(list(dtypes))
        seen.add((m, n, dtype))
        rows = types.SimpleNamespace(shape=torch.Size((m, n)), dtype=dtypes[dtype])
        assert runtime._launch(-1, rows, dtype) is rows
    store = default_store()
    instances = sum(len(store.get("h100", dtype).candidates) for dtype in dtypes)
    assert len(seen) > 90_000  # nearly every shape was new
    assert len(built) == len(runtime._builds) <= instances  # each instance built once
    assert len(runtime._recent) <= runtime.RECENT_SHAPES
    assert len(runtime._gpu_keys) == 1
    assert len(store._cache) <= store._cache_limit
