"""Simulation drivers: random numbers drawn from States, progress bars."""
