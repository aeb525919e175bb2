"""What one shard computes per call of :attr:`EINetwork.step`: the neuron
update, the spike exchange and the delivery of inputs to its own neurons.
Functions of the network (its States and parameters), run inside
``bs.shard_map``."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from brainshard import models as bm
from examples.cuba.params import neuron_update


def count_inputs(net: Any, fired):
  """Input counts (exc, inh) of the local neurons from the global spikes."""
  p = net.params
  if net.connectivity == "onthefly":
    rows = jax.lax.axis_index("x") * net.n_local + jnp.arange(net.n_local)
    return bm.pull_counts(fired, rows, n=p.n, n_exc=p.n_exc, k=p.k,
                          seed=net.seed)
  return bm.deliver_counts(fired, net.indptr.value, net.indices.value,
                           n_local=net.n_local, n_exc=p.n_exc,
                           max_degree=net.max_degree)


def gather(net: Any, spikes, axis: int):
  """The global spikes. On one device no all-gather at all: XLA:CPU runs a
  one-device all-gather as a real collective (a rendezvous, about 10% of
  a 4000-neuron step)."""
  if net.mesh.shape["x"] == 1:
    return spikes
  return jax.lax.all_gather(spikes, "x", axis=axis, tiled=True)


def every_step(net: Any):
  """One step; the spikes are all-gathered every step."""
  pending = net.pending.value
  v, ge, gi, ref, spikes = neuron_update(
      net.params, net.v.value, net.ge.value, net.gi.value,
      net.refractory.value, pending[0, 0], pending[0, 1])
  net.v.value, net.ge.value, net.gi.value = v, ge, gi
  net.refractory.value = ref
  fired = gather(net, spikes, 0)
  now = jnp.stack(count_inputs(net, fired))[None]
  net.pending.value = jnp.concatenate([pending[1:], now])
  return spikes


def one_block(net: Any):
  """``delay`` steps with one all-gather: every spike of the last block
  arrives in this one (spikes of step t arrive at step t + delay)."""
  p = net.params
  fired = gather(net, net.pending.value, 1)
  inputs = jax.lax.map(lambda f: jnp.stack(count_inputs(net, f)), fired)

  def one(carry, counts):
    v, ge, gi, ref, spikes = neuron_update(p, *carry, counts[0], counts[1])
    return (v, ge, gi, ref), spikes

  carry = (net.v.value, net.ge.value, net.gi.value, net.refractory.value)
  carry, spikes = jax.lax.scan(one, carry, inputs)
  net.v.value, net.ge.value, net.gi.value, net.refractory.value = carry
  net.pending.value = spikes
  return spikes
