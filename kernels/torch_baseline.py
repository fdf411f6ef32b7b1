"""``torch.softmax`` as a candidate: the baseline every other variant must beat to be chosen."""
from __future__ import annotations

from typing import Any

from kernels.base import Build, KernelConfig, Resources, Variant


class TorchSoftmax(Variant):
    name = "torch_softmax"
    seed = "torch"
    backend = "torch"
    description = "torch.softmax(x, -1, out=...) as shipped with PyTorch"

    def all_configs(self) -> list[KernelConfig]:
        return [KernelConfig()]

    def build(self, config: KernelConfig, dtype: str, n: int) -> Build:
        import torch

        def launch(x: Any, out: Any) -> None:
            torch.softmax(x, dim=-1, out=out)

        def apply(x: Any) -> Any:
            return torch.softmax(x, dim=-1)

        return Build(self.name, config, dtype, launch, Resources(), apply=apply)
