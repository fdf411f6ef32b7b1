"""Every registered CUDA variant compiles with nvcc for every (config, dtype) it declares, on sm_80 and
sm_90, and the configs it declares spill-free use no local memory (``ptxas -v``).

Runs on the CPU (CI). One generated ``.cu`` per (variant, arch) includes the variant's source and
forces every template instance by taking its address on the host side; the nvcc calls run in
parallel, once per session. Skipped, with the reason, where nvcc is absent.
"""
from __future__ import annotations

import atexit
import functools
import importlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kernels.registry
from kernels.cuda import loader

ARCHS = (80, 90)
CUDA_ENTRIES = [(module, cls) for _name, _backend, module, cls in kernels.registry._REGISTRY if module.startswith("kernels.cuda.")]
NVCC = shutil.which("nvcc") or (
    "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None
)
NVCC_TIMEOUT_S = 1800

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, /usr/local/cuda/bin): no CUDA toolkit here")


@dataclass
class KernelReport:
    registers: int = -1
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0


@dataclass
class CompileResult:
    ok: bool
    log: str
    kernels: dict[str, KernelReport] = field(default_factory=dict)  # demangled (or mangled) name -> report
    demangled: bool = False
    seconds: float = 0.0


def variant_class(module_name: str, class_name: str) -> type:
    return getattr(importlib.import_module(module_name), class_name)


def name_expressions(variant, config, dtype: str) -> list[str]:
    """The template instances one (config, dtype) launches: ``name_expressions`` where a variant
    launches several kernels per config, else its one ``name_expression``."""
    several = getattr(variant, "name_expressions", None)
    return list(several(config, dtype)) if callable(several) else [variant.name_expression(config, dtype)]


def archs_of(variant) -> tuple[int, ...]:
    return tuple(a for a in ARCHS if a >= int(getattr(variant, "min_arch", 0)))


def instances(variant) -> list[tuple[str, str, object]]:
    """(name expression, dtype, config) for every config and declared dtype."""
    return [
        (expr, dtype, config)
        for dtype in variant.dtypes
        for config in variant.all_configs()
        for expr in name_expressions(variant, config, dtype)
    ]


def normalized(name: str) -> str:
    name = re.sub(r"\s+", "", name)
    return name[len("void"):] if name.startswith("void") else name


@functools.lru_cache(maxsize=1)
def demangler() -> str | None:
    return shutil.which("cu++filt") or shutil.which("c++filt")


def parse_ptxas(log: str) -> dict[str, KernelReport]:
    reports: dict[str, KernelReport] = {}
    current: KernelReport | None = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            current = reports.setdefault(m.group(1), KernelReport())
        elif current is not None and (m := re.search(
            r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line
        )):
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
        elif current is not None and (m := re.search(r"Used (\d+) registers", line)):
            current.registers = int(m.group(1))
    return reports


def demangle(reports: dict[str, KernelReport]) -> tuple[dict[str, KernelReport], bool]:
    tool = demangler()
    if tool is None or not reports:
        return reports, False
    names = list(reports)
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    plain = out.splitlines()
    if len(plain) != len(names):
        return reports, False
    return {normalized(p): reports[n] for p, n in zip(plain, names)}, True


def compile_variant(variant, arch: int, workdir: Path) -> CompileResult:
    exprs = sorted({expr for expr, _, _ in instances(variant)})
    source = workdir / f"{variant.name}_sm{arch}.cu"
    refs = ",\n".join(f"    (void*)&{expr}" for expr in exprs)
    source.write_text(f'#include "{variant.source}"\n\nvoid* softmax_compile_refs[] = {{\n{refs}\n}};\n')
    command = [
        NVCC, "-std=c++17", f"-arch=sm_{arch}", "-Xptxas", "-v", "-I", str(loader.SOURCE_DIR),
        "-cubin", "-o", str(source.with_suffix(".cubin")), str(source),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    log = done.stdout + done.stderr
    reports, demangled = demangle(parse_ptxas(log))
    return CompileResult(done.returncode == 0, log, reports, demangled, time.perf_counter() - started)


@functools.lru_cache(maxsize=1)
def compile_jobs() -> dict[tuple[str, int], Future]:
    """Start compiling every importable CUDA variant for its archs, in parallel, once per session;
    each test waits only for its own (variant, arch)."""
    workdir = Path(tempfile.mkdtemp(prefix="softmax_nvcc_"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1))
    atexit.register(pool.shutdown, wait=False, cancel_futures=True)
    jobs: dict[tuple[str, int], Future] = {}
    for module_name, class_name in CUDA_ENTRIES:
        try:
            variant = variant_class(module_name, class_name)()
        except Exception:  # noqa: BLE001 - reported by test_cuda_variant_imports_and_describes_itself
            continue
        for arch in archs_of(variant):
            jobs[(class_name, arch)] = pool.submit(compile_variant, variant, arch, workdir)
    return jobs


@pytest.mark.parametrize(("module_name", "class_name"), CUDA_ENTRIES, ids=[c for _, c in CUDA_ENTRIES])
def test_cuda_variant_imports_and_describes_itself(module_name, class_name):
    variant = variant_class(module_name, class_name)()
    assert variant.backend == "cuda"
    assert (loader.SOURCE_DIR / variant.source).is_file()
    assert variant.all_configs(), f"{variant.name} declares no configs"
    for expr, dtype, config in instances(variant):
        assert expr.strip(), f"{variant.name} {config} {dtype}: empty name expression"


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize(("module_name", "class_name"), CUDA_ENTRIES, ids=[c for _, c in CUDA_ENTRIES])
def test_cuda_variant_compiles_without_spills(module_name, class_name, arch):
    variant = variant_class(module_name, class_name)()
    if arch not in archs_of(variant):
        pytest.skip(f"{variant.name} needs sm_{variant.min_arch}+ (min_arch), not sm_{arch}")
    result = compile_jobs()[(class_name, arch)].result()
    assert result.ok, f"nvcc failed for {variant.name} on sm_{arch}:\n{result.log[-6000:]}"

    if not result.demangled:  # no demangler: the whole file must be spill-free if every config is
        if all(variant.spill_free(config) for _, _, config in instances(variant)):
            spilled = {n: r for n, r in result.kernels.items() if r.spill_stores or r.spill_loads}
            assert not spilled, f"{variant.name} sm_{arch}: spills in {spilled}"
        return
    problems = []
    for expr, dtype, config in instances(variant):
        report = result.kernels.get(normalized(expr))
        if report is None:
            matches = [n for n in result.kernels if n.startswith(normalized(expr) + "(")]
            report = result.kernels[matches[0]] if matches else None
        if report is None:
            problems.append(f"{expr}: not in the ptxas output (names: {sorted(result.kernels)[:5]}...)")
        elif variant.spill_free(config) and (report.spill_stores or report.spill_loads):
            problems.append(
                f"{config} {dtype} ({expr}): {report.spill_stores} B spill stores, "
                f"{report.spill_loads} B spill loads, {report.registers} registers"
            )
    assert not problems, f"{variant.name} on sm_{arch}:\n" + "\n".join(problems)


@needs_nvcc
@pytest.mark.parametrize("arch", ARCHS)
def test_plain_copy_reference_compiles_without_spills(arch, tmp_path):
    """The copy the speed-of-light reference times (kernels/cuda/plain_copy.py) is not a variant."""
    from kernels.cuda import plain_copy

    source = tmp_path / "plain_copy_refs.cu"
    source.write_text(f'#include "{plain_copy.SOURCE}"\n\nvoid* refs[] = {{(void*)&plain_copy16<{plain_copy.UNROLL}>}};\n')
    done = subprocess.run([NVCC, "-std=c++17", f"-arch=sm_{arch}", "-Xptxas", "-v", "-I", str(loader.SOURCE_DIR),
                           "-cubin", "-o", str(tmp_path / "p.cubin"), str(source)],
                          capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    reports = parse_ptxas(log)
    assert reports and not any(r.spill_stores or r.spill_loads for r in reports.values()), log
