"""Triton softmax variants (named ``triton_impl`` so it never shadows the ``triton`` package)."""
