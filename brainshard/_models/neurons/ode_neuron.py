"""What NEST's GSL-integrated neurons share beyond :class:`NeuronModel`.

NEST's ``iaf_cond_*``, ``aeif_*`` and ``hh_*`` models keep two things
outside their ODE that a pure step has to carry in its state:

* ``IntegrationStep``: the step size GSL's control proposed last (NEST's
  ``B_.IntegrationStep_``), where the next step's solver starts. It starts
  at 0, read as "one simulation step", as NEST's ``init_buffers_`` sets it
  (a model's initial state cannot name ``dt``).
* ``I_stim``: the current (pA) the current devices delivered in the last
  step (NEST's ``B_.I_stim_``), which the ODE sees during this step.

They also refuse the parameters NEST refuses (``BadProperty``), and count
refractory steps as NEST's ``Time`` does.

A shard of fewer than 8 neurons is computed as 8 (the last neuron
repeated, then dropped): XLA:CPU compiles float32 arithmetic on 1-3 lanes
differently (other multiply-add contractions), and the adaptive step
control turns those last-bit differences into different substeps, so a
neuron would not get the same numbers alone as beside others.

Example:
  >>> from brainshard._models.neurons.ode_neuron import nest_steps
  >>> nest_steps(2.0, 0.1), nest_steps(0.25, 0.1), nest_steps(0.0, 0.1)
  (20, 3, 0)
"""

from __future__ import annotations

import math
from typing import Any, Callable, ClassVar, Mapping

import jax.numpy as jnp
import numpy as np

from brainshard._models.neurons.base import NeuronModel

__all__ = ["OdeNeuron", "checked_dt", "nest_steps", "on_dtype"]

# NEST's default clock: 1000 tics per ms.
_TICS_PER_MS = 1000.0
# Shards narrower than this are padded (see the module doc).
_MIN_LANES = 8


def nest_steps(ms: Any, dt: float) -> Any:
  """Whole steps in ``ms`` as ``Time(Time::ms(ms)).get_steps()`` counts
  them: rounded to tics, then up to whole steps; int (or int32 array)."""
  tics = np.floor(np.asarray(ms, np.float64) * _TICS_PER_MS + 0.5)
  per_step = round(dt * _TICS_PER_MS)
  steps = (tics + per_step - 1) // per_step
  return int(steps) if np.ndim(steps) == 0 else steps.astype(np.int32)


def on_dtype(c: Mapping[str, Any], dtype: Any) -> dict:
  """The constants as arrays of the state's ``dtype`` (ints stay int32),
  so that float64 host constants neither widen a float32 state nor narrow
  a float64 one."""
  out = {}
  for name, value in c.items():
    given = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
    kind = jnp.int32 if jnp.issubdtype(given, jnp.integer) else dtype
    out[name] = jnp.asarray(value, kind)
  return out


class OdeNeuron(NeuronModel):
  """A NEST model that GSL integrates: NEST's parameter checks at
  construction, and ``r`` (refractory steps left, int32),
  ``IntegrationStep`` and ``I_stim`` in its state (not recordable).
  Subclasses implement :meth:`step`, which :meth:`update` calls.

  Class attributes (beyond :class:`NeuronModel`'s):
    checks: ``(test(params) -> bool or bool array, message)`` pairs, NEST's
      ``BadProperty`` conditions, each one that fails raises ``ValueError``.
  """

  counters: ClassVar[tuple[str, ...]] = ("r",)
  checks: ClassVar[tuple[tuple[Callable[[Mapping], Any], str], ...]] = ()
  # the state every GSL model carries besides its ODE's variables
  carried: ClassVar[Mapping[str, float]] = {
      "r": 0, "IntegrationStep": 0.0, "I_stim": 0.0}

  def __init__(self, **params: Any):
    super().__init__(**params)
    for test, message in self.checks:
      if not np.all(test(self.params)):
        raise ValueError(f"{self.nest_name}: {message}")

  def constants(self, params: Mapping[str, Any], dt: float) -> dict:
    """The parameters but ``t_ref``, with ``dt`` and ``ref_steps``
    (``t_ref`` in NEST's steps); subclasses add their own."""
    dt = checked_dt(self.nest_name, dt)
    c = {k: params[k] for k in self.defaults if k != "t_ref"}
    c["dt"] = dt
    c["ref_steps"] = nest_steps(params["t_ref"], dt)
    return c

  def update(self, c, state, inputs, currents):
    """One step (see :class:`NeuronModel`) in the state's float dtype, on
    at least 8 lanes."""
    n = next(iter(state.values())).shape[-1]
    dtype = state["V_m"].dtype
    c = on_dtype(c, dtype)
    inputs = jnp.asarray(inputs, dtype)
    # a scalar current (no device) is every neuron's
    currents = jnp.broadcast_to(jnp.asarray(currents, dtype), (n,))
    if n == 0 or n >= _MIN_LANES:
      return self.step(c, state, inputs, currents)

    def pad(x):
      x = jnp.asarray(x)
      if x.ndim == 0 or x.shape[-1] != n:
        return x
      return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, _MIN_LANES - n)],
                     mode="edge")

    c = {k: pad(v) for k, v in c.items()}
    out, spikes = self.step(c, {k: pad(v) for k, v in state.items()},
                            pad(inputs), pad(currents))
    return {k: v[..., :n] for k, v in out.items()}, spikes[..., :n]

  def step(self, c, state, inputs, currents):
    """:meth:`update` itself, for any number of neurons (``c``,
    ``inputs`` and ``currents`` already in the state's dtype)."""
    raise NotImplementedError

  @staticmethod
  def first_step(h: Any, dt: Any) -> Any:
    """The solver's starting step: the carried one, or ``dt`` at first."""
    return jnp.where(h > 0, h, dt)


def checked_dt(name: str, dt: float) -> float:
  """``dt`` as a positive finite float, else a ``ValueError`` naming it."""
  if not (isinstance(dt, (int, float, np.integer, np.floating))
          and math.isfinite(float(dt)) and float(dt) > 0):
    raise ValueError(f"{name}: dt must be a positive finite number of ms, "
                     f"got {dt!r}.")
  return float(dt)
