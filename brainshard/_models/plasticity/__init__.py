"""Synaptic plasticity as NEST computes it: ``stdp_synapse``,
``tsodyks2_synapse`` and pair-based rules of one's own, as pure, vectorised,
lazy updates of the synapses a presynaptic spike visits.

Modules: ``history.py`` (a post neuron's last spikes and K_minus, bounded),
``pair_rule.py`` (the lazy pair update, NEST's order), ``stdp.py``
(``stdp_synapse`` as a pair rule), ``tsodyks2.py``, ``model.py`` (a synapse
model's parameters), ``rows.py`` (the update on a shard's CSR rows).

Wiring into delivery (a note for ``Delivery``; nothing here changes it):

* Per synapse, in the index's slot order: the weight, writable and in the
  rule's dtype (float64 to follow NEST to 1e-9; the index now keeps
  float32). Nothing else: ``Kplus``/``t_last`` (STDP) and ``u``/``x``/
  ``t_last`` (tsodyks2) only depend on the presynaptic spike train, so with
  a projection's parameters shared they are kept per presynaptic neuron,
  ``[n_pre]`` on every shard (NEST keeps them per synapse; the dendritic
  delay, per synapse, only moves the window read from the post history).
  And per synapse, for pair rules, ``seen``: the post spikes its updates
  have passed, where its next window starts (``pair_rows(seen=...)``).
  Every shard updates its copy with the same arithmetic: identical bits.
* Per post neuron, on its shard: a ``PostHistory`` (``[n_local, H]`` times
  and ``K_minus``, ``[n_local]`` count) and the neuron's ``tau_minus``.
* In a step ``t`` (update from ``t`` to ``t + 1``): the neurons update and
  emit ``spikes``; then ``record(hist, spikes, t + 1, tau_minus, dt)``
  (NEST stamps a spike with the step's end); then delivery visits the fired
  rows (``pair_rows``/``tsodyks2_rows`` with stamp ``t + 1``), writes the
  new weights back at their slots and adds the *updated* weight (STDP) or
  ``x u weight`` (tsodyks2) into the ring buffer where it now adds
  ``index.weight``. With ``every > 1`` steps per exchange the neurons' steps
  record their spikes as they go and the block's spikes are delivered
  after, step by step: the window ``(t_last - d, t - d]`` ends at least one
  step before the newest recorded spike, as in NEST's min-delay slices.
* The ring must hold a post neuron's spikes since ``t_last - d`` of each
  input (and up to the exchange): ``H`` = 128 by default (see
  ``history.py``); sum ``inexact`` into a counter State and report it.
* Bit-identical on any number of devices: all arithmetic is elementwise
  per synapse or per neuron, with no reduction across shards (``inexact``
  is an integer count).
"""
