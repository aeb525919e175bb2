"""brainstate 0.5.4's own tests, run against brainshard through a name shim.

``python -m benchmarks.brainstate_suite`` prints the pass count per area
(docs/migrating-from-brainstate.md explains what is deselected and why);
``tests/test_brainstate_suite.py`` runs it as a slow test.
"""
