"""What a stimulation device is: NEST's parameters on the host, and a pure
per-step emitter.

A :class:`Device` holds no arrays and no States. It names its NEST model,
its parameters (NEST's names, defaults and units: ``rate`` Hz,
``amplitude``/``mean``/``std`` pA, times in ms) and what it sends:
``emits = 'spikes'`` (a count per target, which the network multiplies by
the connection's weight and adds to the target's receptor input) or
``emits = 'current'`` (pA per target, times the weight, into the target's
current input). :meth:`Device.constants` computes, on the host, what a
step needs; :meth:`Device.emit` is a pure function of them and of the
global step ``t``, callable inside the network's ``bs.shard_map``.

**Step timing.** Steps count from 0; step ``t`` advances the network from
``t * dt`` to ``(t + 1) * dt``. ``emit(c, t, ...)`` is what the device sends
in NEST's update of step ``t`` (its ``lag`` loop). NEST stamps that event
``t + 1`` and a target reads it, over a connection of ``d`` steps, in its
update of step ``t + d``. So, with a neuron's ``update(c, state, inputs,
currents)`` (``_models/neurons/base.py``):

* ``emits == 'spikes'``: ``inputs[t + d][receptor] += weight * emit(c, t)``;
* ``emits == 'current'``: ``currents[t + d] += weight * emit(c, t)``.

Equivalently, in step ``k`` a connection of delay ``d`` delivers ``emit(c,
k - d)``, which is 0 for ``k < d`` (no device sends in a negative step).

Which steps a device sends in is NEST's ``StimulationDevice::is_active``
with ``t_min = origin + start`` and ``t_max = origin + stop`` in steps:
``poisson_generator`` sends in step ``t`` if ``t_min < t <= t_max``;
``spike_generator`` sends a spike stamped ``s`` (in step ``s - 1``) if
``t_min < s <= t_max``; the current generators send in step ``t`` if
``t_min < t + 2 <= t_max`` (NEST adds 2 for them). ``constants`` holds
the window as ``first``/``last`` (inclusive steps; ``spike_generator``
keeps only the spikes inside it). It is a dict of NumPy arrays that may
be closed over or passed into ``bs.jit`` (traced): the numbers are the
same.

**Targets and draws.** ``targets`` is this shard's number of target slots
``n`` (an int), or the int array ``[n]`` of each slot's target index (the
row of per-target parameters, ``spike_generator``'s ``spike_times`` per
target; a slot with -1, or an index past the last row, gets 0). ``emit``
returns one value per slot. Random devices (``random = True``) take a
``key``: a typed PRNG key, an int seed, or a State holding a key (a
``bs.RandomState``, read, never advanced). Their draws are a pure
function of ``(key, t)`` and go through ``bs.random`` with ``size=n``, so
inside ``bs.shard_map`` a shard draws its block of the unsharded draw
over the network's neuron axis: slot ``i`` of shard ``s`` is global
element ``s * n + i`` (``spec=``, as ``bs.random``'s, says otherwise), and
a neuron's draws never depend on the mesh. Each connection from a random
device needs a key of its own: NEST gives every target its own train, and
two connections of one generator to one neuron two trains.

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.devices.base import Device, active, slots
  >>> class Pulse(Device):
  ...   nest_name = 'pulse'
  ...   defaults = {**Device.defaults, 'amplitude': 0.0}
  ...   emits = 'current'
  ...   def constants(self, dt):
  ...     return {**self.window(dt), 'amplitude': self.params['amplitude']}
  ...   def emit(self, c, t, targets, key=None, *, dtype=jnp.float32,
  ...            spec=None):
  ...     n, hit = slots(targets)
  ...     on = active(c, t) & hit
  ...     return jnp.where(on, c['amplitude'], jnp.zeros(n, dtype))
  >>> pulse = Pulse(amplitude=5.0, start=1.0, stop=2.0)
  >>> c = pulse.constants(0.1)
  >>> int(c['first']), int(c['last'])  # 1.0 < (t + 2) * 0.1 <= 2.0
  (9, 18)
  >>> [float(pulse.emit(c, t, 1)[0]) for t in (8, 9, 18, 19)]
  [0.0, 5.0, 5.0, 0.0]
  >>> Pulse(amplitud=1.0)
  Traceback (most recent call last):
  ...
  ValueError: pulse: unknown parameter(s) ['amplitud']; its parameters are ['amplitude', 'origin', 'start', 'stop'] (NEST's names).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from brainshard._core.state.state import State
from brainshard._models.devices.times import INT32_MAX, INT32_MIN, grid_steps
from brainshard._models.nest_params import refuse_unknown

__all__ = ["Device", "active", "slots", "base_key", "number", "flag"]

# NEST's StimulationDevice: the activity window, in ms.
WINDOW = {"origin": 0.0, "start": 0.0, "stop": math.inf}


class Device:
  """A NEST stimulation device: parameters on the host, a pure emitter.

  Subclasses set the class attributes and implement :meth:`constants` and
  :meth:`emit` (see the module doc for the step timing); ``Device(**params)``
  overrides NEST's defaults.

  Class attributes:
    nest_name: NEST's model name (``'poisson_generator'``).
    defaults: parameters (NEST's names and units) and their NEST defaults;
      every device has ``origin``, ``start`` and ``stop`` (ms).
    emits: ``'spikes'`` (counts: times the weight into a receptor's input)
      or ``'current'`` (pA: times the weight into the current input).
    random: whether :meth:`emit` draws (and needs a ``key``).
  """

  nest_name: ClassVar[str] = ""
  defaults: ClassVar[Mapping[str, Any]] = WINDOW
  emits: ClassVar[str] = "spikes"
  random: ClassVar[bool] = False

  def __init__(self, **params: Any):
    refuse_unknown(self.nest_name, self.defaults, params)
    merged = {name: self.check(name, params.get(name, default))
              for name, default in self.defaults.items()}
    if merged["stop"] < merged["start"]:
      raise ValueError(f"{self.nest_name}: stop >= start required (got "
                       f"start={merged['start']}, stop={merged['stop']}; "
                       "NEST's BadProperty).")
    self.validate(merged)
    self.params: dict[str, Any] = merged

  def __repr__(self) -> str:
    changed = {k: v for k, v in self.params.items()
               if not _same(v, self.defaults[k])}
    inner = ", ".join(f"{k}={v!r:.20}" for k, v in changed.items())
    return f"{type(self).__name__}({inner})"

  def check(self, name: str, value: Any) -> Any:
    """One parameter, checked against the kind of its default: a number
    (``stop`` may be ``inf``, its default), or a flag; subclasses check
    their sequences."""
    what = f"{self.nest_name}: {name}"
    default = self.defaults[name]
    if isinstance(default, bool):
      return flag(value, what)
    return number(value, what, allow_inf=default == math.inf)

  def validate(self, params: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the parameter where NEST refuses
    ``params`` (``BadProperty``); the default accepts everything."""

  def window(self, dt: float) -> dict:
    """``first`` and ``last`` (int32): the steps ``t`` in which the device
    sends (``first <= t <= last``), from NEST's ``is_active``: a spike
    device's step ``t`` lies in ``(t_min, t_max]``, a current device's
    ``t + 2`` does. ``t_max`` of ``stop = inf`` never comes."""
    t_min, t_max = self.limits(dt)
    lead = 2 if self.emits == "current" else 0
    # steps count from 0: a current device with start = 0 sends from step
    # 0 (NEST's "step -1" never runs), and a negative step sends nothing
    first, last = max(t_min + 1 - lead, 0), t_max - lead
    return {"first": np.int32(np.clip(first, INT32_MIN, INT32_MAX)),
            "last": np.int32(np.clip(last, INT32_MIN, INT32_MAX))}

  def limits(self, dt: float) -> tuple[int, Any]:
    """NEST's ``t_min = origin + start`` and ``t_max = origin + stop``
    in steps (``t_max`` is ``inf`` for ``stop = inf``)."""
    p = self.params
    origin = int(grid_steps(p["origin"], dt, f"{self.nest_name}: origin"))
    start = int(grid_steps(p["start"], dt, f"{self.nest_name}: start"))
    # a stop past int32's steps never comes, as NEST's +inf
    stop = (math.inf if p["stop"] >= INT32_MAX * dt else
            int(grid_steps(p["stop"], dt, f"{self.nest_name}: stop")))
    return origin + start, origin + stop

  def constants(self, dt: float) -> dict:
    """What :meth:`emit` needs, on the host (NumPy, float64 values)."""
    raise NotImplementedError

  def emit(self, c: Mapping[str, Any], t: Any, targets: Any, key: Any = None,
           *, dtype: Any = jnp.float32, spec: Any = None) -> jax.Array:
    """What the device sends in step ``t`` (int32, traced or not) to each
    of ``targets``' slots: ``[n]`` counts (int32) or currents (``dtype``)."""
    raise NotImplementedError


def active(c: Mapping[str, Any], t: Any) -> Any:
  """Whether step ``t`` lies in the device's window (``first..last``)."""
  t = jnp.asarray(t, jnp.int32)
  return (t >= c["first"]) & (t <= c["last"])


def slots(targets: Any) -> tuple[int, Any]:
  """``(n, hit)``: this shard's slots and which of them the device reaches
  (True, or a bool ``[n]`` for an array of target indices)."""
  if isinstance(targets, (int, np.integer)) and not isinstance(
      targets, (bool, np.bool_)):
    if targets < 0:
      raise ValueError(f"targets: a number of slots must be >= 0, got "
                       f"{targets}.")
    return int(targets), True
  ids = jnp.asarray(targets)
  if ids.ndim != 1 or not jnp.issubdtype(ids.dtype, jnp.integer):
    raise TypeError(f"targets: expected a number of slots or a 1-D int "
                    f"array of target indices, got {ids.dtype} of shape "
                    f"{ids.shape}.")
  return ids.shape[0], ids >= 0


def base_key(key: Any, where: str) -> jax.Array:
  """A random device's key: a typed key, a raw uint32 key, an int seed, or
  the key a State holds (read, not advanced)."""
  if isinstance(key, State):
    key = key.value
  if key is None:
    raise TypeError(f"{where}: a random device needs key= (a PRNG key, an "
                    "int seed or a bs.RandomState), one per connection.")
  if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
    return jax.random.key(key)
  dtype = getattr(key, "dtype", None)
  if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
    return key
  if dtype == jnp.uint32 and jnp.ndim(key) == 1:
    return jax.random.wrap_key_data(key)
  raise TypeError(f"{where}: key must be a PRNG key, an int seed or a "
                  f"bs.RandomState, got {type(key).__name__}.")


def number(value: Any, what: str, allow_inf: bool = False) -> float:
  """A finite number (NumPy scalars too; ``+inf`` where ``allow_inf``)."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, (int, float, np.integer, np.floating)):
    raise TypeError(f"{what} must be a number, got {value!r}.")
  value = float(value)
  if not (math.isfinite(value) or (allow_inf and value == math.inf)):
    raise ValueError(f"{what} must be finite, got {value}.")
  return value


def flag(value: Any, what: str) -> bool:
  """A flag: True or False (NumPy's bool too)."""
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{what} must be True or False, got {value!r}.")
  return bool(value)


def _same(value: Any, default: Any) -> bool:
  try:
    return bool(np.array_equal(value, default))
  except (TypeError, ValueError):
    return False
