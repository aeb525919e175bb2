"""Simulation tools: random numbers drawn from States, the chunked loop,
monitors and records, the Runner."""
