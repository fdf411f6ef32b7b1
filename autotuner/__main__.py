"""``python -m autotuner ...``: the same command line as the ``autotuner`` script (every command
registered, which ``python -m autotuner.cli.app`` cannot promise: there the module runs as ``__main__``
before the command modules register on it)."""
from autotuner.cli import app

app(prog_name="autotuner")
