"""Brunel's (2000) model A, as NEST's ``brunel_delta_nest`` example builds
it, on ``bm.Network`` (docs/brunel.md).

``model`` holds the network (NEST's calls, one for one) and Brunel's four
regimes of Fig. 8; ``python -m examples.brunel`` runs one and prints each
population's rate, CV of ISI and the speed; ``nest_reference.json`` holds
NEST 3.10's statistics of the same network over several seeds, which
``python -m benchmarks brunel-nest`` regenerates and tests/test_brunel.py
compares with.
"""
