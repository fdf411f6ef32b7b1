"""What ``autotuner kernels`` and ``GET /kernels`` list: every registered variant and its configs."""
from __future__ import annotations

from typing import Any

from kernels import all_variants


def describe_variants(check_available: bool = True) -> list[dict[str, Any]]:
    """One plain dict per registered variant: name, seed, backend, dtypes, configs, availability."""
    described = []
    for variant in all_variants():
        unimportable = getattr(variant, "backend", "") == "unknown"  # registry stand-in: keep its reason
        support = variant.available() if (check_available or unimportable) else None
        try:
            configs = [config.as_dict() for config in variant.all_configs()]
        except Exception as exc:  # a broken variant is listed with its reason, never hides the rest
            configs, support = [], type(support or variant.available())(False, f"configs failed: {exc}")
        described.append({
            "name": variant.name,
            "seed": getattr(variant, "seed", ""),
            "backend": getattr(variant, "backend", ""),
            "description": getattr(variant, "description", ""),
            "dtypes": list(getattr(variant, "dtypes", ())),
            "configs": configs,
            "available": bool(support) if support is not None else None,
            "reason": (support.reason if support is not None and not support else ""),
        })
    return described
