"""CLI commands for evaluating dispatch tables and the dispatched softmax (registered on ``cli.app``)."""
from __future__ import annotations

from autotuner.cli import app  # noqa: F401 - commands below register on it
