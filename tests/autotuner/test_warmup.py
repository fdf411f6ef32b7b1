"""Warm-up without a GPU: which instances it would compile (every candidate of the GPU's tables that it
runs), which row lengths reach every Triton bucket, and the CLI's clear error where no GPU is present."""
from __future__ import annotations

from typer.testing import CliRunner

from autotuner.cli import app
from autotuner.lookup.select import default_store
from autotuner.runtime_warmup import _bucket_probes, _candidates, _probes, _read_indexes


def test_bucket_probes_reach_every_block_and_alignment_of_the_range():
    assert _bucket_probes(1, 64) == [1, 2, 4, 8, 15, 16, 31, 32, 63, 64]
    assert _bucket_probes(2049, 8192) == [4095, 4096, 8191, 8192]  # (2048, 4096] and (4096, 8192], both alignments
    assert _bucket_probes(5, 5) == [5]
    for n_min, n_max in ((1, 1024), (300, 70000), (4097, 4100)):
        probes = _bucket_probes(n_min, n_max)
        assert all(n_min <= n <= n_max for n in probes)
        buckets = {(1 << (n - 1).bit_length(), n % 16 == 0, n == 1) for n in range(n_min, n_max + 1)}
        assert {(1 << (n - 1).bit_length(), n % 16 == 0, n == 1) for n in probes} == buckets


def test_a_cuda_instance_is_taught_its_shortest_and_longest_row_a_multiple_of_16_where_it_can():
    assert _probes(False, {"n_min": 262145}) == [262160, 1 << 22]
    assert _probes(False, {"n_min": 1, "n_max": 16}) == [16]
    assert _probes(False, {"n_min": 3, "n_max": 9}) == [9]
    assert _probes(False, {"n_min": 16385, "n_max": 40448}) == [16400, 40448]
    assert _probes(False, {"n_min": 65, "n_max": 250}) == [80, 240]
    assert _probes(False, {}) == [16, 1 << 22]
    assert _probes(True, {"n_min": 2049, "n_max": 8192}) == _bucket_probes(2049, 8192)


def test_candidates_are_every_instance_of_the_gpus_tables():
    for dtype in ("fp32", "fp16", "bf16"):
        table = default_store().get("h100", dtype)
        got = _candidates("h100", dtype)
        assert [(i, v, c) for i, v, c, _ in got] == [(i, c["variant"], c["config"]) for i, c in enumerate(table.candidates)]
    assert _candidates("no_such_gpu", "fp16") == []
    # a GPU without a table of its own: the instances of the table it borrows that it runs (the H800
    # answers from the H100's, every kernel of which it runs; the A100 PCIe has no table to borrow)
    assert [(i, v, c) for i, v, c, _ in _candidates("h800", "fp16")] == \
        [(i, v, c) for i, v, c, _ in _candidates("h100", "fp16")]
    assert _candidates("a100-pcie", "fp16") == []


def test_warmup_without_a_gpu_is_one_clear_line():
    result = CliRunner().invoke(app, ["warmup", "--dtype", "fp16", "--no-native"])
    assert result.exit_code == 1
    assert "warmup needs a CUDA device" in result.output
    bad = CliRunner().invoke(app, ["warmup", "--dtype", "fp64"])
    assert bad.exit_code == 2 and "unknown dtype 'fp64'" in bad.output


def test_warmup_reads_the_indexes_that_the_first_requests_would_decode(monkeypatch):
    """A table's index partitions are decoded on first use (about 10 ms): warm-up decodes those of
    the view ``softmax()`` picks from and ``select_kernel`` answers from, for both N classes."""
    from autotuner import runtime
    from autotuner.lookup import select

    monkeypatch.setattr(select, "_default_store", None)  # a fresh store: nothing decoded yet
    monkeypatch.setattr(runtime, "_pickers", {})
    monkeypatch.setitem(runtime._gpu_keys, 7, "h100")
    monkeypatch.setattr(runtime, "_build_on", lambda device, variant, config, dtype, n: (variant, config))
    table = select.default_store().get("h100", "bf16")
    view = select.default_store().answering_view("h100", "bf16")[1]
    assert table._partitions[view] == [None, None]
    made = []
    monkeypatch.setattr(runtime, "plan_for", lambda device, dtype: made.append((device, dtype)))
    _read_indexes(7, "h100", ("bf16",))
    assert all(partition is not None for partition in table._partitions[view])
    assert made == [(7, "bf16")]  # and the native plan softmax() calls go through


def test_plan_for_makes_the_plan_only_where_the_module_is_loaded_and_the_gpu_has_its_table(monkeypatch):
    import types

    from autotuner import runtime
    from autotuner.lookup.select import default_store

    routed = []
    module = types.SimpleNamespace(plan_new=lambda *args: "plan", dispatch_route=lambda *args: routed.append(args[:3]))
    store = default_store()
    table, view = store.answering_view("h100", "fp16")
    picker = [store, store.generation, table, view, [None] * (len(table.candidates) + 1), None]
    monkeypatch.setattr(runtime, "_pickers", {(0, "fp16"): picker, (1, "fp16"): [store, 0, None, 0, [], None]})
    monkeypatch.setattr(runtime, "_module_loaded", None)
    monkeypatch.setattr(runtime, "native_module", lambda: None)
    assert runtime.plan_for(0, "fp16") is None  # no module
    monkeypatch.setattr(runtime, "native_module", lambda: module)
    assert runtime.plan_for(1, "fp16") is None and runtime.plan_for(0, "bf16") is None  # no own table, no picker
    assert runtime.plan_for(0, "fp16") == "plan" and routed == [(0, "fp16", "plan")]
