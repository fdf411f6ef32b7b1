"""Device names to model keys: every real name maps to its model; a name that merely contains one does not."""
from __future__ import annotations

import pytest

from autotuner.lookup.gpu import normalize_gpu_name, validate_gpu_key


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 SXM5 80GB", "h100"), ("NVIDIA H100 SXM5 64GB", "h100"),
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H100 NVL 94GB", "h100-nvl"),
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", "h200-nvl"), ("NVIDIA GH200 480GB", "gh200"), ("NVIDIA H800", "h800"),
    ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA A100-SXM4-40GB", "a100"), ("NVIDIA A100 80GB PCIe", "a100-pcie"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie"), ("NVIDIA A800-SXM4-80GB", "a800"), ("NVIDIA A10", "a10"), ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA RTX 6000 Ada Generation", "rtx6000"),
    ("NVIDIA RTX A6000", "rtxa6000"), ("NVIDIA B200", "b200"), ("Tesla V100-SXM2-16GB", "v100"), ("Tesla T4", "t4"),
])
def test_real_device_names_map_to_their_model(name, key):
    assert normalize_gpu_name(name) == key and validate_gpu_key(name) == key


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100-fake-x", "h100-fake-x"), ("h100 fake", "h100-fake"), ("my h100 lol", "my-h100-lol"),
    ("Fake GPU h100", "fake-gpu-h100"), ("NVIDIA H100 80GB HBM3 (fake)", "h100-80gb-hbm3-fake"),
    # a MIG slice has a fraction of the H100's bandwidth and SMs: not the H100's tables
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "h100-80gb-hbm3-mig-1g-10gb"),
])
def test_a_name_that_only_contains_a_model_is_not_that_model(name, key):
    assert normalize_gpu_name(name) == key and validate_gpu_key(name) == key


@pytest.mark.parametrize("text", ["h100-fake-x", "myh100", "h100x"])
def test_a_key_that_only_contains_a_model_stays_itself(text):
    assert validate_gpu_key(text) == text
