"""The long-row variants compile without spills for every architecture they claim (min_arch and up)
among sm_80, sm_89, sm_90 and sm_100, where this nvcc lists the architecture; the register-row
variants' check on sm_80 / sm_90 is test_cuda_compile.py's. Runs on the CPU."""
from __future__ import annotations

import functools
import subprocess

import pytest

from kernels.cuda.cluster_keep import ClusterKeepCuda
from kernels.cuda.long_split import LongSplitCuda
from tests.kernels.test_cuda_compile import NVCC, compile_variant, instances, needs_nvcc, normalized

CLAIMED_ARCHS = (80, 89, 90, 100)
VARIANTS = (LongSplitCuda, ClusterKeepCuda)


@functools.lru_cache(maxsize=1)
def toolchain_archs() -> frozenset[int]:
    listed = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True, timeout=60).stdout
    return frozenset(int(line.split("_")[1]) for line in listed.split() if line.startswith("compute_"))


@needs_nvcc
@pytest.mark.parametrize("arch", CLAIMED_ARCHS)
@pytest.mark.parametrize("variant_class", VARIANTS, ids=lambda c: c.name)
def test_long_row_variant_compiles_for_claimed_arch(variant_class, arch, tmp_path):
    variant = variant_class()
    if arch < variant.min_arch:
        pytest.skip(f"{variant.name} claims sm_{variant.min_arch}+, not sm_{arch}")
    if arch not in toolchain_archs():
        pytest.skip(f"this nvcc does not list sm_{arch}")
    result = compile_variant(variant, arch, tmp_path)
    assert result.ok, f"nvcc failed for {variant.name} on sm_{arch}:\n{result.log[-6000:]}"
    assert result.kernels, result.log[-2000:]
    spilled = [f"{expr} ({dtype})" for expr, dtype, _ in instances(variant)
               if any(r.spill_stores or r.spill_loads for n, r in result.kernels.items()
                      if not result.demangled or n.startswith(normalized(expr)))]
    assert not spilled, f"{variant.name} sm_{arch} spills: {spilled}"
