"""The ``autotuner`` command line, on top of every other layer: it may start ``service``; nothing below
imports it. ``app`` (``autotuner.cli.app``) holds the shared options and error handling; each command
module registers its commands on it when imported here, so the package's import graph has no cycle."""
from autotuner.cli import commands, confirm, database, evaluate, exchange, predict, sweep, warmup  # noqa: F401 - importing registers the commands
from autotuner.cli.app import app

__all__ = ["app"]
