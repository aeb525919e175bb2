"""What a neuron model is: NEST's parameters and state, and one pure step.

A :class:`NeuronModel` holds no arrays and no States. It names its NEST
model, its parameters (NEST's names, defaults and units: ms, mV, pA, pF,
nS), its state variables and their initial values, and its receptors; it
computes its per-step constants on the host in float64 (NEST's exact
propagators) and advances every neuron of a shard by one step as a pure
function. A network keeps the state in States, one per variable, sharded
over its neurons, and calls :meth:`NeuronModel.update` inside its
``bs.shard_map``.

One step follows NEST's ``update`` for one ``lag``:

* ``inputs [R, n]``: what the spike ring buffers hold for this step, one
  row per receptor, exactly as NEST's buffers hold it (weights summed, in
  the model's unit: pA for ``psc`` models, mV for ``iaf_psc_delta``, nS for
  ``cond`` models). Where NEST sends a spike to the excitatory or the
  inhibitory buffer by the sign of its weight (``sign_routed``), row 0 is
  the sum of the positive weights and row 1 the sum of the negative ones,
  still negative.
* ``currents [n]``: the current (pA) that current devices
  (``dc_generator``, ``noise_generator``, ...) deliver in this step, as
  NEST's ``B_.currents_`` (a model that applies it one step later, as the
  ``iaf_psc`` models do, keeps it in its state).
* the result: the new state and the spikes ``bool [n]`` emitted in this
  step (NEST stamps them with the step's end, ``(step + 1) * dt``).

Example:
  >>> import numpy as np
  >>> from brainshard._models.neurons.base import NeuronModel
  >>> class Leaky(NeuronModel):
  ...   nest_name = 'leaky'
  ...   defaults = {'tau_m': 10.0, 'V_th': 1.0}
  ...   initial = {'V_m': 0.0}
  ...   def constants(self, p, dt):
  ...     return {'decay': np.exp(-dt / p['tau_m']), 'V_th': p['V_th']}
  ...   def update(self, c, state, inputs, currents):
  ...     v = state['V_m'] * c['decay'] + inputs[0]
  ...     spikes = v >= c['V_th']
  ...     return {'V_m': np.where(spikes, 0.0, v)}, spikes
  >>> model = Leaky(tau_m=20.0)
  >>> model.params['tau_m'], model.receptors
  (20.0, ('ex',))
  >>> state = model.init_state(3)
  >>> c = model.constants(model.params, 0.1)
  >>> state, spikes = model.update(c, state, np.array([[0.5, 1.5, 0.0]]),
  ...                              np.zeros(3))
  >>> spikes.tolist()
  [False, True, False]
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._models.nest_params import refuse_unknown

__all__ = ["NeuronModel", "ARCHIVING", "cast_constants", "lower_bound"]

# NEST's ArchivingNode parameters, taken by every neuron model: the post
# trace's time constant of the STDP synapses onto the neuron (ms).
ARCHIVING = {"tau_minus": 20.0}


class NeuronModel:
  """A NEST neuron model: parameters, state, receptors, one pure step.

  Subclasses set the class attributes and implement :meth:`constants` and
  :meth:`update`; ``Model(**params)`` overrides NEST's defaults (a number,
  or one value per neuron as a 1-D sequence).

  Class attributes:
    nest_name: NEST's model name (``'iaf_psc_exp'``).
    defaults: parameters (NEST's names and units) and their NEST defaults.
    initial: state variables and NEST's initial values; a string value
      names a parameter whose value it takes (``{'V_m': 'E_L'}``).
    receptors: what each row of ``inputs`` is (``('ex', 'in')``).
    sign_routed: whether NEST picks the receptor by the weight's sign.
    recordables: what a ``multimeter`` may record (default: the state's
      float variables).

  Every model also takes NEST's ``tau_minus`` (ms, default 20): the time
  constant of the trace ``K_minus`` an ``ArchivingNode`` keeps of its own
  spikes for the STDP synapses onto it (appended to each class's
  ``defaults``; the model's step never reads it).

  A default that is a ``bool`` (NEST's ``refractory_input``,
  ``consistent_integration``) is a flag: it takes a bool, one for the whole
  model, and :meth:`update` reads it from :attr:`params` as a Python value
  (it picks the code path, so it cannot be a per-neuron array).
  :meth:`validate` refuses what NEST's ``set_status`` refuses.
  """

  nest_name: ClassVar[str] = ""
  defaults: ClassVar[Mapping[str, float]] = {}
  initial: ClassVar[Mapping[str, float | str]] = {}
  receptors: ClassVar[tuple[str, ...]] = ("ex",)
  sign_routed: ClassVar[bool] = False
  recordables: ClassVar[tuple[str, ...] | None] = None
  # State variables that count steps (refractory counters): int32.
  counters: ClassVar[tuple[str, ...]] = ()

  def __init_subclass__(cls, **kwargs: Any):
    super().__init_subclass__(**kwargs)
    if "defaults" in cls.__dict__ and "tau_minus" not in cls.defaults:
      cls.defaults = {**cls.defaults, **ARCHIVING}

  def __init__(self, **params: Any):
    refuse_unknown(self.nest_name, self.defaults, params)
    merged: dict[str, Any] = dict(self.defaults)
    for name, value in params.items():
      what = f"{self.nest_name}: {name}"
      default = self.defaults[name]
      merged[name] = (_flag(value, what) if isinstance(default, bool)
                      else _checked(value, what, default))
    if np.any(np.asarray(merged.get("tau_minus", 1.0)) <= 0):
      raise ValueError(f"{self.nest_name}: tau_minus must be > 0.")
    self.validate(merged)
    self.params: dict[str, Any] = merged

  def __repr__(self) -> str:
    changed = {k: v for k, v in self.params.items()
               if np.ndim(v) or v != self.defaults[k]}
    inner = ", ".join(f"{k}={v!r:.20}" for k, v in changed.items())
    return f"{type(self).__name__}({inner})"

  @property
  def n_receptors(self) -> int:
    return len(self.receptors)

  def recordable(self) -> tuple[str, ...]:
    """What a multimeter may record of this model."""
    if self.recordables is not None:
      return self.recordables
    return tuple(k for k in self.initial if k not in self.counters)

  def init_state(self, n: int, dtype: Any = jnp.float32,
                 params: Mapping[str, Any] | None = None) -> dict:
    """NEST's initial state for ``n`` neurons as NumPy arrays (floats in
    ``dtype``, counters int32); ``params`` defaults to :attr:`params`."""
    p = self.params if params is None else params
    out = {}
    for name, value in self.initial.items():
      value = p[value] if isinstance(value, str) else value
      kind = np.int32 if name in self.counters else np.dtype(dtype)
      out[name] = np.broadcast_to(np.asarray(value, kind), (n,)).copy()
    return out

  def simulate(self, steps: int, dt: float = 0.1,
               n: int | None = None) -> tuple[dict, Any]:
    """``n`` unconnected neurons of this model, ``steps`` steps of ``dt``
    ms, with no input but their ``I_e``: ``(final state, spikes bool
    [steps, n])``. ``n`` defaults to the length of the per-neuron
    parameters (1 if none is): a model's f-I curve in one call."""
    if n is None:
      n = max([np.size(v) for v in self.params.values()])
    c = self.constants(self.params, dt)
    inputs = jnp.zeros((self.n_receptors, n))
    currents = jnp.zeros(n)

    def step(state, _):
      return self.update(c, state, inputs, currents)

    return jax.lax.scan(step, self.init_state(n), length=steps)

  def validate(self, params: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the parameter where NEST would refuse
    ``params`` (``BadProperty``); the default accepts everything."""

  def constants(self, params: Mapping[str, Any], dt: float) -> dict:
    """Per-step constants (propagators, thresholds, step counts) from the
    parameters, on the host in float64; a value may be one per neuron."""
    raise NotImplementedError

  def update(self, c: Mapping[str, Any], state: Mapping[str, Any],
             inputs: Any, currents: Any) -> tuple[dict, Any]:
    """One step: ``(new state, spikes bool [n])`` (see the module doc)."""
    raise NotImplementedError


def cast_constants(c: Mapping[str, Any], dtype: Any) -> dict:
  """``c`` with every float in ``dtype`` (integers stay int32), so that a
  float32 state stays float32 when x64 is on. Host values beyond the
  dtype's range become its largest finite value instead of overflowing.

  Example:
    >>> import numpy as np
    >>> c = cast_constants({'P': 0.5, 'V_min': -1.8e308, 'n': 20},
    ...                    np.float32)
    >>> c['P'].dtype, bool(c['V_min'] == -np.finfo(np.float32).max)
    (dtype('float32'), True)
    >>> c['n'].dtype
    dtype('int32')
  """
  out = {}
  for name, value in c.items():
    if isinstance(value, (bool, int, float, np.ndarray, np.generic)):
      value = np.asarray(value)
      if np.issubdtype(value.dtype, np.floating):
        big = np.finfo(dtype).max
        value = np.clip(value, -big, big)
      kind = (dtype if np.issubdtype(value.dtype, np.floating) else
              jnp.int32 if np.issubdtype(value.dtype, np.integer) else None)
      out[name] = jnp.asarray(value, kind)
    else:  # already on the device (or traced): convert floats only
      kind = jnp.result_type(value)
      out[name] = (value.astype(dtype) if jnp.issubdtype(kind, jnp.floating)
                   else value)
  return out


def lower_bound(v_min: Any) -> np.ndarray:
  """A lower bound (NEST's ``V_min``) as a constant fit for any dtype:
  below float32's range (NEST's default of -DBL_MAX) it bounds nothing,
  and becomes -inf, which float32 holds without overflowing.

  Example:
    >>> lower_bound([-1.8e308, -80.0]).tolist()
    [-inf, -80.0]
  """
  v_min = np.asarray(v_min, np.float64)
  return np.where(v_min < -np.finfo(np.float32).max, -np.inf, v_min)


def _flag(value: Any, what: str) -> bool:
  """A flag parameter: a bool (NumPy's too), one for the whole model."""
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{what} must be True or False (one for the whole "
                    f"model), got {value!r}.")
  return bool(value)


def _checked(value: Any, what: str, default: Any = 0.0) -> Any:
  """A parameter value: a finite number (NumPy scalars too) or a 1-D
  sequence of them, one per neuron. Where NEST's default is an infinity
  (``iaf_psc_alpha``'s ``V_min`` of -inf: no bound), that infinity is
  accepted too."""
  if isinstance(value, bool):
    raise TypeError(f"{what} must be a number, got {value!r}.")
  unbounded = float(default) if math.isinf(default) else None
  if isinstance(value, (int, float, np.integer, np.floating)):
    if not math.isfinite(float(value)) and float(value) != unbounded:
      raise ValueError(f"{what} must be finite, got {value}.")
    return float(value)
  arr = np.asarray(value)
  if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.number):
    raise TypeError(f"{what} must be a number or one number per neuron "
                    f"(1-D), got {type(value).__name__} of shape "
                    f"{np.shape(value)}.")
  if not (np.isfinite(arr) | (arr == unbounded)).all():
    raise ValueError(f"{what} must be finite, got a non-finite entry.")
  return arr.astype(np.float64)
