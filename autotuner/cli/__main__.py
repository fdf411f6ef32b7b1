"""``python -m autotuner.cli ...``: the same command line as the ``autotuner`` script."""
from autotuner.cli import app

app(prog_name="autotuner")
