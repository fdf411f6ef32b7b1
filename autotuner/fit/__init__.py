"""Fitting dispatch tables from measurements, with their leave-one-out regret."""
