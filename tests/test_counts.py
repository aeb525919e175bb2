"""The integer-count kernels (``bs.models.hashed_presynaptic``,
``csr_from_table``, ``deliver_counts``, ``pull_counts``): push and pull
count exactly what the hashed table says, and the table does not depend on
which rows a shard asks for."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from brainshard import models as bm


@pytest.mark.slow
def test_table_rows_are_mesh_independent_and_split_by_receptor():
  """A shard's rows are the same rows of the whole table; the first
  round(0.8 k) slots are excitatory, the rest inhibitory."""
  n, k, n_exc = 64, 10, 51
  table = np.asarray(bm.hashed_presynaptic(jnp.arange(n), k, n=n,
                                          n_exc=n_exc, k=k, seed=1))
  assert (table[:, :8] < n_exc).all() and (table[:, 8:] >= n_exc).all()
  part = bm.hashed_presynaptic(jnp.arange(16, 32), k, n=n, n_exc=n_exc, k=k,
                               seed=1)
  np.testing.assert_array_equal(part, table[16:32])


@pytest.mark.slow
@pytest.mark.parametrize("n", [1000, 4007])
def test_event_delivery_counts_every_spike_at_every_branch(n):
  """Push delivery over the CSR (which of its size branches runs depends on
  how many fired; n = 4007 leaves a partial last block of neurons) counts
  exactly what the pull table says, for spike counts on both sides of
  every branch's size."""
  k, n_exc = 20, int(0.8 * n)
  pre = bm.hashed_presynaptic(jnp.arange(n), k, n=n, n_exc=n_exc, k=k, seed=3)
  indptr, indices = bm.csr_from_table(pre, n)
  max_degree = int(jnp.diff(indptr).max())
  deliver = jax.jit(lambda f: bm.deliver_counts(
      f, indptr, indices, n_local=n, n_exc=n_exc, max_degree=max_degree))
  rng = np.random.default_rng(0)
  table = np.asarray(pre)
  for fired_count in (0, 1, 4, 5, 16, 17, 64, 65, 256, 257, n):
    fired = np.zeros(n, bool)
    fired[rng.choice(n, fired_count, replace=False)] = True
    exc, inh = deliver(jnp.asarray(fired))
    hit = fired[table]
    np.testing.assert_array_equal(exc, hit[:, :16].sum(1), str(fired_count))
    np.testing.assert_array_equal(inh, hit[:, 16:].sum(1), str(fired_count))


@pytest.mark.slow
def test_pull_counts_match_the_table_on_a_slice_of_rows():
  """On-the-fly delivery for a shard's rows counts the fired partners of
  exactly those rows."""
  n, k, n_exc = 500, 20, 400
  table = np.asarray(bm.hashed_presynaptic(jnp.arange(n), k, n=n,
                                          n_exc=n_exc, k=k, seed=2))
  fired = np.random.default_rng(1).random(n) < 0.1
  rows = jnp.arange(100, 225)
  exc, inh = bm.pull_counts(jnp.asarray(fired), rows, n=n, n_exc=n_exc, k=k,
                            seed=2)
  hit = fired[table[100:225]]
  np.testing.assert_array_equal(exc, hit[:, :16].sum(1))
  np.testing.assert_array_equal(inh, hit[:, 16:].sum(1))


@pytest.mark.slow
@pytest.mark.parametrize("size", [4, 64, 300, 2000])
def test_unsorted_fired_ids_are_the_sorted_ones_in_some_order(size):
  n = 2000
  fired = np.zeros(n, bool)
  hits = np.random.default_rng(size).choice(n, min(size, 50), replace=False)
  fired[hits] = True
  f = jnp.asarray(fired)
  got = np.sort(np.asarray(bm.fired_ids(f, size, sort=False)))
  np.testing.assert_array_equal(got, bm.fired_ids(f, size))
