"""The CUDA launch layer's names for the variant modules, by job: the compile cache and device facts
(``kernels.cuda.compiler``), argument packing and launch on torch's stream (``kernels.cuda.launch``,
``kernels.cuda.packing``).

Module state (the bound driver calls, launcher caches) lives in those modules; a test
that replaces it patches it there.
"""
from __future__ import annotations

from kernels.cuda.compiler import (  # noqa: F401 - re-exported
    CUDA_TYPE, DEFAULT_SMEM_LIMIT, SOURCE_DIR, cupy_available, device_limits, function_handle, get_function,
    needs_smem_opt_in, require_attribute, resources_of, set_dynamic_smem, source_text, toolchain_fingerprint,
)
from kernels.cuda.launch import (  # noqa: F401 - re-exported
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, DIRECT_LAUNCH_ENV,
    KernelLauncher, current_raw_stream, current_stream, launch,
)
