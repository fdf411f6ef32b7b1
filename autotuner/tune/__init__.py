"""Measuring: the sweep plan and loop, measurement and verification, worker processes, timing
methods, shared work lists, re-timing, progress, shape grids and the environment record."""
