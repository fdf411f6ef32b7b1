"""The Triton variants on the CPU, through Triton's interpreter (``TRITON_INTERPRET=1``).

Triton picks the interpreter when it is imported, and the GPU tests of this directory need the real
compiler in the same pytest process. So every interpreter check runs in a subprocess: this file run
as a script with the variable set, which prints one JSON report. The checks: random rows for N in
``N_VALUES`` and M in ``M_VALUES``, torch's edge rows (NaN, +-inf, huge magnitudes, all -inf),
dtypes fp32 / fp16 / bf16, a few configs per variant chosen to cover each code path (smallest tile,
persistent grid, software pipelining); outputs are poisoned first and sit between guard bands. It
takes about a minute on two cores.

The rest runs in-process: configs, constraints, split planning, availability, and an sm_90 compile
(no GPU needed: Triton ships ptxas) checking that interior tiles load as 16-byte vectors, unspilled.
"""
from __future__ import annotations

import struct
import types

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("triton_fused_row", "triton_one_row", "triton_tiled_three_pass", "triton_online_two_pass", "triton_split_row")
DTYPES = ("fp32", "fp16", "bf16")
N_VALUES = (1, 7, 33, 1000, 4096)
EXTRA_N = {"triton_split_row": (4097, 9000)}  # split-row starts at 4 tiles; unaligned, several chunks
M_VALUES = (0, 1, 5)
GUARD = 16
SENTINEL = 1234.0


# --- subprocess side -------------------------------------------------------------------------------
def _pick_configs(variant, ns):
    """Smallest config, and the first persistent (per_sm > 0) and pipelined (num_stages > 1) ones."""
    usable = [c for c in variant.all_configs() if any(variant.supports(5, n, "fp32", c) for n in ns)]
    picked = usable[:1]
    for wanted in (lambda c: c.get("per_sm", 0) > 0, lambda c: c.get("num_stages", 1) > 1):
        picked += [c for c in usable if wanted(c) and c not in picked][:1]
    return picked


def _check_one(build, x, dtype):
    import torch

    from kernels.reference import POISON, check_softmax

    m, n = x.shape
    buffer = torch.full((GUARD + m * n + GUARD,), SENTINEL, dtype=x.dtype)
    out = buffer[GUARD:GUARD + m * n].view(m, n)
    out.fill_(POISON)
    build.launch(x, out)
    if not bool((torch.cat([buffer[:GUARD], buffer[-GUARD:]]) == SENTINEL).all()):
        return "wrote outside the output (guard band changed)"
    result = check_softmax(out, x, dtype)
    return None if result.ok else result.message


def _worker(name: str) -> dict:
    import torch

    import kernels
    from kernels.reference import edge_input, random_input

    torch.manual_seed(0)
    variant = kernels.get_variant(name)
    report = {"available": str(variant.available()), "checks": 0, "failures": [], "resources": []}
    if not variant.available():
        return report
    ns = N_VALUES + EXTRA_N.get(name, ())
    for index, config in enumerate(_pick_configs(variant, ns)):
        for dtype in DTYPES if index == 0 else ("fp32", "bf16"):  # fp16 and bf16 share every code path
            for n in ns:
                if not variant.supports(5, n, dtype, config):
                    continue
                build = variant.build(config, dtype, n)
                report["resources"].append(build.resources.as_dict())
                inputs = [random_input(m, n, dtype, device="cpu") for m in M_VALUES]
                for x in inputs + [edge_input(n, dtype, device="cpu")]:
                    message = _check_one(build, x, dtype)
                    report["checks"] += 1
                    if message:
                        report["failures"].append(f"{config} {dtype} M={x.shape[0]} N={n}: {message}")
    return report


# --- pytest side -----------------------------------------------------------------------------------
def _interpret(name: str) -> dict:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    proc = subprocess.run(
        [sys.executable, __file__, name], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"interpreter worker failed:\n{proc.stderr[-6000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", VARIANTS)
def test_triton_variant_matches_float64_reference_under_interpreter(name):
    report = _interpret(name)
    assert report["available"].startswith("Support(ok=True"), report["available"]
    assert report["checks"] > 0
    assert report["failures"] == [], "\n".join(report["failures"][:20])
    # no compiled kernel under the interpreter: only the config-derived thread count is known
    assert all(r["registers"] is None and r["blocks_per_sm"] is None for r in report["resources"])
    assert all(r["threads_per_block"] for r in report["resources"])


@pytest.mark.parametrize("name", VARIANTS)
def test_triton_variant_declares_focused_configs_and_data_constraints(name):
    import kernels

    variant = kernels.get_variant(name)
    configs = variant.all_configs()
    assert 2 <= len(configs) <= 18  # pruned to what the recorded sweep showed matters (docs/SWEEP.md)
    assert len({c.key for c in configs}) == len(configs)
    for config in configs:
        for dtype in DTYPES:
            limits = variant.constraints(config, dtype)
            assert set(limits) <= {"n_min", "n_max", "n_multiple_of", "m_min", "m_max"}
            assert all(isinstance(v, int) and v > 0 for v in limits.values())
            assert limits.get("n_min", 1) <= limits.get("n_max", 1 << 40)
    # every N from 1 to 64K has at least one config, for every dtype, but split-row (long rows only)
    if name != "triton_split_row":
        for dtype in DTYPES:
            for n in (1, 2, 31, 1000, 4096, 50257, 65536):
                assert variant.configs(8, n, dtype), (name, dtype, n)


def test_fused_row_bounds_follow_the_register_budget():
    import kernels

    variant = kernels.get_variant("triton_fused_row")
    assert variant.configs(1, 1, "fp32")  # one warp serves tiny rows
    assert variant.configs(64, 32768, "fp32")
    assert not variant.configs(64, 65537, "fp16")
    assert all(c["num_warps"] == 32 for c in variant.configs(64, 65536, "fp32"))


def test_split_plan_covers_every_row_window():
    from kernels.base import cdiv
    from kernels.triton_impl.split_row import split_plan

    cases = [(1, 262144, 1024, 528), (4, 50257, 2048, 528), (64, 4097, 1024, 264), (512, 8192, 2048, 132)]
    for m, n, block, programs in cases:
        s, chunk_tiles = split_plan(m, n, block, programs)
        span = n if n % 16 == 0 else n + 15  # a row window ends at most 15 elements past N
        assert s * chunk_tiles * block >= span
        assert (s - 1) * chunk_tiles * block < span  # no chunk starts past every window
        assert m * s <= programs + m  # what the workspace is sized for
        assert s <= cdiv(span, block)


class _FakeCompiled:
    """Stands in for a CompiledKernel: ``run`` is Triton's launcher, ``kernel[grid](...)`` the
    hook-calling entry point."""

    function = 0xF00D
    packed_metadata = (4, 1, 0)

    def __init__(self, calls):
        self.calls = calls

    def run(self, *args):
        self.calls.append(("run", args))

    def __getitem__(self, grid):
        return lambda *args: self.calls.append(("compiled", grid, args))


class _FakeJit:
    """Stands in for a JITFunction: records launches, returns a 'compiled kernel' as Triton does."""

    arg_names = ["x_ptr", "y_ptr", "M", "N", "BLOCK", "STAGES"]
    __name__ = "fake"

    def __init__(self):
        self.calls = []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append(("jit", grid, args, kwargs))
            return _FakeCompiled(self.calls)

        return run


@pytest.fixture
def fake_cuda_context(monkeypatch):
    """Device 0 current, its current stream 0x5EED: what the fast path asks torch for."""
    from kernels.triton_impl import launch

    monkeypatch.setattr(launch, "_current_device", lambda: 0)
    monkeypatch.setattr(launch, "_raw_stream", lambda index: 0x5EED + index)
    monkeypatch.setattr(launch, "_hooks_idle", lambda: True)
    return launch


def test_launcher_relaunches_through_the_compiled_kernel_with_every_argument(fake_cuda_context):
    """The fast path (GPU only) in miniature: first launch per specialisation through the JIT, then
    through the kept kernel's ``run`` with a 3-D grid, the raw stream, pointers as ints, no launch
    metadata or hooks, and the constexprs appended positionally; a new alignment, dtype or N % 16
    class goes through the JIT again. M (do_not_specialize) does not."""
    import torch

    from kernels.triton_impl.launch import Launcher

    fn = _FakeJit()
    launcher = Launcher(fn, ("BLOCK", "STAGES"), {"num_warps": 4, "num_stages": 1}, plain=("M",))
    x = torch.zeros(64)
    launcher((3,), (x, x, 5, 32), (32, 1))
    launcher((3,), (x, x, 7, 32), (32, 1))  # another M: same kernel
    launcher((3,), (x[1:], x, 7, 32), (32, 1))  # misaligned input: a new specialisation
    launcher((3,), (x, x, 7, 33), (64, 1))
    launcher((3,), (x.half(), x, 7, 32), (32, 1))  # another dtype
    kinds = [call[0] for call in fn.calls]
    assert kinds == ["jit", "run", "jit", "jit", "jit"]
    assert fn.calls[0][3] == {"BLOCK": 32, "STAGES": 1, "num_warps": 4, "num_stages": 1}
    ptr = x.data_ptr()
    assert fn.calls[1][1] == (3, 1, 1, 0x5EED, 0xF00D, (4, 1, 0), None, None, None, ptr, ptr, 7, 32, 32, 1)


def test_launcher_calls_registered_launch_hooks_through_the_compiled_kernel(fake_cuda_context, monkeypatch):
    import torch

    from kernels.triton_impl.launch import Launcher

    fn = _FakeJit()
    launcher = Launcher(fn, ("BLOCK", "STAGES"), {"num_warps": 4, "num_stages": 1}, plain=("M",))
    x = torch.zeros(64)
    launcher((2, 3), (x, x, 5, 32), (32, 1))
    monkeypatch.setattr(fake_cuda_context, "_hooks_idle", lambda: False)
    launcher((2, 3), (x, x, 5, 32), (32, 1))
    assert [call[0] for call in fn.calls] == ["jit", "compiled"]
    assert fn.calls[1][1:] == ((2, 3, 1), (x, x, 5, 32, 32, 1))


def test_launcher_describes_a_kept_kernels_launch_for_the_native_module(fake_cuda_context, monkeypatch):
    """``Launcher.native``: the launch ``launcher(grid, args, consts)`` would issue, from the kernel
    kept for that specialisation (x and out as markers, taken as 16-byte aligned), with the driver's
    null scratch pointers appended; None where that specialisation (this device, this N % 16 class)
    has not been compiled yet."""
    import torch

    from kernels import native
    from kernels.triton_impl.launch import OUT, X, Launcher

    fn = _FakeJit()
    launcher = Launcher(fn, ("BLOCK", "STAGES"), {"num_warps": 4, "num_stages": 1}, plain=("M",))
    x = torch.zeros(64)
    launcher((3,), (x, x, 5, 32), (32, 1))  # compiled and kept (N = 32: a multiple of 16)
    kernel = launcher.compiled[next(iter(launcher.compiled))][3]
    kernel.metadata = types.SimpleNamespace(num_warps=4, num_ctas=1, shared=512)
    kernel.src = types.SimpleNamespace(signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32", "N": "i32",
                                                  "BLOCK": "constexpr", "STAGES": "constexpr"})
    module = types.SimpleNamespace(param_sizes=lambda function: (8, 8, 4, 4, 8, 8))
    monkeypatch.setattr(native, "load", lambda: module)
    monkeypatch.setattr(native, "_extra_nulls", {})
    got = launcher.native(0, "fp32", (7,), (X, OUT, 9, 48), (32, 1))  # another M and N of the same class
    assert got == (0xF00D, (7, 1, 1), (128, 1, 1), 512, struct.pack("<QQi4xi4x", 0, 0, 9, 48) + bytes(16), (0,), (1,))
    assert launcher.native(0, "fp32", (7,), (X, OUT, 9, 47), (32, 1)) is None  # N % 16 != 0: not compiled
    assert launcher.native(1, "fp32", (7,), (X, OUT, 9, 48), (32, 1)) is None  # another device
    assert launcher.native(0, "fp16", (7,), (X, OUT, 9, 48), (32, 1)) is None  # another dtype


def test_launcher_without_direct_launch_always_goes_through_the_jit(fake_cuda_context, monkeypatch):
    import torch

    from kernels.triton_impl.launch import DIRECT_LAUNCH_ENV, Launcher

    monkeypatch.setenv(DIRECT_LAUNCH_ENV, "0")
    fn = _FakeJit()
    launcher = Launcher(fn, ("BLOCK", "STAGES"), {"num_warps": 4, "num_stages": 1}, plain=("M",))
    x = torch.zeros(64)
    for _ in range(2):
        launcher((3,), (x, x, 5, 32), (32, 1))
    assert [call[0] for call in fn.calls] == ["jit", "jit"]
    assert fn.calls[1][1] == (3, 1, 1)


def test_generated_binder_is_never_coarser_than_the_specialisation_key():
    """Two argument tuples with one binder key must have the same ``_spec_key`` (what Triton
    specialises on), so a kept kernel is never launched with arguments it was not compiled for."""
    import itertools

    import torch

    from kernels.triton_impl.launch import _make_binder, _spec_key

    names, plain = ["x_ptr", "y_ptr", "M", "N"], frozenset({2})
    bind = _make_binder(names, plain)
    base = torch.zeros(256)
    tensors = [base, base[1:], base[4:], base.half(), base.double()[2:]]
    ints = [0, 1, 2, 15, 16, 17, 32, 2**31 - 1, 2**31, 2**31 + 16, -1, -(2**31) - 1]
    seen: dict[tuple, tuple] = {}
    for a, b, m, n in itertools.product(tensors, tensors[:2], ints, ints):
        key, values = bind(0, (a, b, m, n), (8,))
        assert values == (a.data_ptr(), b.data_ptr(), m, n)
        spec = _spec_key((a, b, m, n), plain)
        assert seen.setdefault(key, spec) == spec


def test_triton_variants_need_a_gpu_or_the_interpreter():
    import torch

    import kernels

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    for name in VARIANTS:
        support = kernels.get_variant(name).available()
        assert not support and "CUDA" in support.reason


def _compile_sm90(fn, signature, constexprs, aligned, num_warps):
    """Compile a jit kernel for sm_90 without a GPU (Triton's bundled ptxas); returns the register
    count, spill bytes and counts of 16-byte global loads / scalar global loads in the PTX."""
    import re
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    if not (tools / "ptxas").exists() or not (tools / "cuobjdump").exists():
        pytest.skip("this Triton wheel ships no ptxas / cuobjdump")
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in aligned}
    full_signature = {**signature, **{name: "constexpr" for name in constexprs}}
    source = ASTSource(fn, full_signature, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(kernel.asm["cubin"])
        cubin.flush()
        usage = subprocess.run(
            [tools / "cuobjdump", "--dump-resource-usage", cubin.name], capture_output=True, text=True
        )
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage.stdout)
    ptx = kernel.asm["ptx"]
    return {
        "registers": int(found[1]),
        "spill_bytes": int(found[2]),
        "loads_v4": len(re.findall(r"ld\.global[\w.:]*\.v4\.", ptx)),
        "loads_scalar": len(re.findall(r"ld\.global(?![\w.:]*\.v\d)[\w.:]*\.[bfu](?:16|32) ", ptx)),
    }


@pytest.mark.slow
def test_tiled_kernels_vectorize_interior_tiles_without_spills_on_sm90():
    """The row window keeps interior tiles aligned for any N: the online kernel's aligned build loads
    only 16-byte vectors, the unaligned one vectors inside and scalars at the two edge tiles."""
    from kernels.triton_impl.fused_row import _fused_row_kernel
    from kernels.triton_impl.one_row import _one_row_kernel
    from kernels.triton_impl.online_tiled import _online_kernel

    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "M": "i32", "N": "i32"}
    aligned = _compile_sm90(
        _online_kernel, signature, {"BLOCK": 4096, "STAGES": 1, "ALIGNED": True}, ["x_ptr", "y_ptr", "N"], 8
    )
    assert aligned["spill_bytes"] == 0 and aligned["loads_v4"] > 0 and aligned["loads_scalar"] == 0
    shifted = _compile_sm90(
        _online_kernel, signature, {"BLOCK": 4096, "STAGES": 1, "ALIGNED": False}, ["x_ptr", "y_ptr"], 8
    )
    assert shifted["spill_bytes"] == 0 and shifted["loads_v4"] > 0
    fused = _compile_sm90(
        _fused_row_kernel, signature, {"BLOCK": 32768, "STAGES": 1}, ["x_ptr", "y_ptr", "N"], 16
    )
    assert fused["spill_bytes"] == 0 and fused["loads_v4"] > 0
    one_row = _compile_sm90(_one_row_kernel, {"x_ptr": "*bf16", "y_ptr": "*bf16", "N": "i32"}, {"BLOCK": 32768},
                            ["x_ptr", "y_ptr", "N"], 16)
    assert one_row["spill_bytes"] == 0 and one_row["loads_v4"] > 0


def test_one_row_takes_the_fused_row_bounds_of_one_stage():
    import kernels
    from kernels.base import KernelConfig

    one_row, fused = kernels.get_variant("triton_one_row"), kernels.get_variant("triton_fused_row")
    for dtype in DTYPES:
        for config in one_row.all_configs():
            limits = one_row.constraints(config, dtype)
            staged = fused.constraints(KernelConfig.of(num_warps=config["num_warps"], num_stages=1), dtype)
            assert {k: v for k, v in limits.items() if k != "m_max"} == staged
            assert limits["m_max"] == 2**31 - 1  # one program per row: the grid's x limit


def test_optional_variants_import_and_say_why_they_are_unavailable():
    """CuTe DSL, QuACK and Liger are optional: their modules import without the packages, and
    ``available()`` names what is missing (here: the package or the GPU)."""
    import kernels

    for name in ("cute_online", "quack_softmax", "liger_softmax"):
        variant = kernels.get_variant(name)
        assert variant.backend in ("cute", "external")
        support = variant.available()
        if not support:
            assert "not importable" in support.reason or "CUDA" in support.reason, support.reason


if __name__ == "__main__":  # the interpreter worker: TRITON_INTERPRET=1 python this_file.py VARIANT
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1")
    import warnings

    warnings.simplefilter("ignore")  # the interpreter's numpy overflow warnings on +-inf rows are expected
    print(json.dumps(_worker(sys.argv[1])))
