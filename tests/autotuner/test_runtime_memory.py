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
        return types.SimpleNamespace(  # no native rule: every launch goes through the memo of recent shapes
            variant=f"fake {self.name}", launch=None, stream_bound=False, native_guard=None, apply=None, native_rule=None,
            native=lambda device, stream, m, n: (0xF00, m, 128, 0, bytes(32), 0, 1))


class Module:
    def run(self, x, stream, *launch):
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
    monkeypatch.setattr(runtime, "_pickers", {})
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
    assert len(runtime._pickers) == len(dtypes)  # one per (device, dtype)
    assert len(store._cache) <= store._cache_limit


def test_the_runtimes_picks_are_select_kernels_and_follow_a_change_of_tables(monkeypatch):
    """``instance_for`` reads picks with ``DispatchTable.pick`` from the GPU's own table (or through
    ``select_kernel`` where it has none): on 20,000 random shapes per GPU it builds what
    ``select_kernel`` answers, and a change of the store's tables is seen on the next call."""
    from autotuner.lookup import select

    made = []
    monkeypatch.setattr(runtime, "_build_on", lambda device, variant, config, dtype, n:
                        made.append(1) or (variant, tuple(config.items())))
    monkeypatch.setattr(runtime, "_builds", {})
    monkeypatch.setattr(runtime, "_pickers", {})
    rng = random.Random(30)
    for device, gpu in enumerate(("h100", "h200", "a10")):  # own tables; none (select_kernel's path)
        monkeypatch.setitem(runtime._gpu_keys, device, gpu)
        for dtype in ("fp32", "fp16", "bf16"):
            for _ in range(20_000 if gpu == "h100" else 3_000):
                m, n = log_uniform(rng, 1 << 20), log_uniform(rng, 1 << 24)
                choice = select.select_kernel(m, n, dtype, gpu=gpu)
                got = runtime.instance_for(device, m, n, dtype)
                if gpu == "a10":
                    runtime._builds[(choice.variant, choice.config_items, dtype, runtime._device_kind(device))] = got
                assert got == (choice.variant, choice.config_items), (gpu, dtype, m, n)
    assert len(runtime._pickers) == 9 and runtime._pickers[(2, "fp16")][2] is None
    store = select.default_store()
    table = store.get("h100", "fp16")
    before = runtime._pickers[(0, "fp16")]
    store.add(table)  # the tables change (a refit): the picker is made again
    runtime.instance_for(0, 3, 5000, "fp16")
    assert runtime._pickers[(0, "fp16")] is not before and runtime._pickers[(0, "fp16")][1] == store.generation


def test_builds_are_kept_per_kind_of_device(monkeypatch):
    """Two GPUs of one model share their builds; a GPU of another kind (fewer SMs: an H100 PCIe beside
    an SXM answers from the same table) gets its own, since a split's launches are sized by the SMs of
    the device its build was made on."""
    device = [0]
    kinds = {0: (9, 0, 132, 2048), 1: (9, 0, 132, 2048), 2: (9, 0, 114, 2048)}
    monkeypatch.setattr(runtime, "_builds", {})
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(runtime.torch.cuda, "current_device", lambda: device[0])
    monkeypatch.setattr(runtime, "_device_kind", kinds.__getitem__)
    builds = []
    for index in (0, 1, 2, 0):
        device[0] = index
        builds.append(runtime.build_for("torch_softmax", {}, "fp32", 10))
    assert builds[0] is builds[1] is builds[3] and builds[2] is not builds[0]
    assert len(runtime._builds) == 2
