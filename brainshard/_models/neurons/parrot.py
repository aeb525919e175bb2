"""NEST's ``parrot_neuron``: it repeats every spike it receives, one step
after it arrives (in the step the input lands in), and does nothing else.

Receptor 0 repeats; receptor 1 does not (NEST's way to drive STDP
synapses onto a parrot without it repeating their spikes, as NEST's own
``test_stdp_synapse.py`` does). Spikes reach a model here as summed
weights, not counts: a parrot fires where its receptor-0 input is not 0,
one spike a step (NEST counts spikes whatever their weight and sends them
with that multiplicity: connect with positive weights, a spike a step).
It has no state; it has NEST's ``tau_minus`` (STDP onto it).

Example:
  >>> import numpy as np
  >>> from brainshard._models.neurons.parrot import ParrotNeuron
  >>> model = ParrotNeuron()
  >>> _, spikes = model.update({}, {}, np.array([[1.0, 0.0, 2.0],
  ...                                            [0.0, 5.0, 0.0]]), 0.0)
  >>> spikes.tolist(), model.receptors
  ([True, False, True], ('repeat', 'stdp_only'))
"""

from __future__ import annotations

import jax.numpy as jnp

from brainshard._models.neurons.base import NeuronModel

__all__ = ["ParrotNeuron"]


class ParrotNeuron(NeuronModel):
  """NEST's ``parrot_neuron`` (see the module doc)."""

  nest_name = "parrot_neuron"
  defaults = {}
  initial = {}
  receptors = ("repeat", "stdp_only")
  recordables = ()

  def constants(self, params, dt):
    return {}

  def update(self, c, state, inputs, currents):
    return {}, jnp.asarray(inputs)[0] != 0
