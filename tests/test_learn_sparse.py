"""``python -m examples.learn_sparse --quick``: a sparse recurrent spiking
network built with ``bm.connect`` learns by gradient through delivery, and
gives the same losses, bit for bit, on 1 and 8 devices."""

import importlib.util

import pytest

from examples import learn_sparse

pytest.importorskip("optax")
# The digits need scikit-learn (the examples extra); without it the made-up
# task runs the same code.
TASK = "digits" if importlib.util.find_spec("sklearn") else "patterns"


@pytest.mark.slow  # two connects and two training programs: ~30 s of CPU
def test_quick_run_learns_and_gives_the_same_losses_on_1_and_8_devices():
  losses = {n: learn_sparse.main(["--quick", "--task", TASK, "--devices",
                                  str(n), "--train-steps", "3"])
            for n in (1, 8)}
  assert losses[1] == losses[8]
  assert all(0 < v < 10 for v in losses[1])
