"""The neurons of one model class on the network's sharded axis: their
parameters, constants and state as States, and one masked step.

Populations of one model class (and the same flags, e.g. ``iaf_psc_delta``'s
``refractory_input``) share a :class:`ModelGroup`: one State per state
variable over the whole padded neuron axis, sharded over the mesh axis, and
the model's constants, a number where every population has the same value
and one value per neuron (a sharded State) where they differ. A shard steps
all its neurons with the group's model and keeps the new values only for
the group's own neurons (a mask from the populations' static id ranges), so
populations of different models share one mesh.

Example:
  >>> import jax
  >>> from brainshard._models.layout import Layout
  >>> from brainshard._models.neurons import IafPscDelta
  >>> from brainshard._models.network.groups import ModelGroup
  >>> mesh = jax.make_mesh((1,), ('x',))
  >>> lay = Layout({'E': 3, 'I': 1})
  >>> g = ModelGroup([('E', IafPscDelta(I_e=1.0)), ('I', IafPscDelta())],
  ...                lay, dt=0.1, mesh=mesh, axis='x')
  >>> sorted(g.states), g.constants.value['I_e'].tolist()
  (['I_stim', 'V_m', 'r', 'refr_spikes_buffer'], [1.0, 1.0, 1.0, 0.0])
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from brainshard._core.state.state import ParamState, ShortTermState
from brainshard._models.layout import Layout
from brainshard._models.neurons.base import NeuronModel

__all__ = ["ModelGroup", "group_key"]


def group_key(model: NeuronModel) -> tuple:
  """Populations with equal keys share a group: the same class and flags
  (a flag is one value for the whole model: it changes the code)."""
  flags = tuple(sorted((k, v) for k, v in model.params.items()
                       if isinstance(model.defaults.get(k), bool)))
  return type(model), flags


def _merged(members: Sequence[tuple[str, NeuronModel]], layout: Layout
            ) -> dict:
  """Every parameter as one number where all members agree, else one
  float64 value per neuron of the padded axis (others: the first member's
  value, which the mask discards)."""
  out = {}
  for name in members[0][1].params:
    values = [model.params[name] for _, model in members]
    if all(np.ndim(v) == 0 for v in values) and len(set(values)) == 1:
      out[name] = values[0]
      continue
    first = np.ravel(values[0])[0]
    arr = np.full(layout.n_padded, first, np.float64)
    for (label, _), value in zip(members, values):
      start, stop = layout.range(label)
      arr[start:stop] = value
    out[name] = arr
  return out


class ModelGroup:
  """The populations ``members`` (``(label, model)``, one model class) of
  ``layout``, their state and constants as States on ``mesh``; ``initial``
  (``{label: {variable: value}}``) overrides NEST's initial values."""

  def __init__(self, members: Sequence[tuple[str, NeuronModel]],
               layout: Layout, *, dt: float, mesh: Any, axis: str,
               dtype: Any = jnp.float32, initial: dict | None = None):
    self.model = members[0][1]
    self.labels = [label for label, _ in members]
    self.ranges = [layout.range(label) for label in self.labels]
    # every real neuron: no mask (the network drops padding's spikes)
    self.everything = sum(b - a for a, b in self.ranges) == layout.n
    params = _merged(members, layout)
    constants = self.model.constants(params, dt)
    per_neuron = {k: v for k, v in constants.items() if np.ndim(v) == 1}
    self.fixed = {k: v for k, v in constants.items() if np.ndim(v) != 1}
    put = lambda x: jax.device_put(x, NamedSharding(mesh, P(axis)))  # noqa: E731
    name = "+".join(self.labels)
    self.constants = ParamState(
        {k: put(np.asarray(v, np.int32 if np.issubdtype(
            np.asarray(v).dtype, np.integer) else dtype))
         for k, v in per_neuron.items()}, name=f"{name}.constants",
        spec=P(axis))
    init = self.model.init_state(layout.n_padded, dtype, params)
    for label, values in (initial or {}).items():
      if label in self.labels:  # a population's own initial values
        start, stop = layout.range(label)
        for k, v in values.items():
          init[k][start:stop] = v
    self.states = {k: ShortTermState(put(v), name=f"{name}.{k}", spec=P(axis))
                   for k, v in init.items()}

  def mask(self, ids: jax.Array) -> jax.Array | None:
    """bool ``[n_local]``: this group's neurons among ``ids``; None when
    the group holds every real neuron."""
    if self.everything:
      return None
    inside = jnp.zeros(ids.shape, bool)
    for start, stop in self.ranges:
      inside = inside | ((ids >= start) & (ids < stop))
    return inside

  def step(self, inputs: jax.Array, currents: jax.Array,
           ids: jax.Array) -> jax.Array:
    """Advances this shard's neurons of the group by one step (inside the
    network's ``bs.shard_map``); returns their spikes."""
    r = self.model.n_receptors
    if inputs.shape[0] < r:  # no projection uses the last receptors
      inputs = jnp.concatenate(
          [inputs, jnp.zeros((r - inputs.shape[0],) + inputs.shape[1:],
                             inputs.dtype)])
    old = {k: s.value for k, s in self.states.items()}
    c = {**self.fixed, **self.constants.value}
    new, spikes = self.model.update(c, old, inputs[:r], currents)
    inside = self.mask(ids)
    for k, s in self.states.items():
      s.value = new[k] if inside is None else jnp.where(inside, new[k], old[k])
    return spikes if inside is None else spikes & inside
