"""``RandomState``: random numbers drawn from States, so they work under
every transform; and the default stream.

A :class:`RandomState` is a State holding a typed PRNG key
(``jax.random.key``). Each draw splits the key, writes the new key back (an
ordinary State write, so draws work under ``bs.jit``, in loops and inside
``bs.shard_map``) and draws from the other half.

Inside a ``bs.shard_map`` body a draw is the block of the unsharded draw
that the shard holds: ``spec=`` (a PartitionSpec over the draw's global
shape; default: the leading axis split over all manual mesh axes) gives the
global shape (the per-shard ``size`` times the mesh axes it names) and the
block, and each element's bits depend only on the key and the element's
global index (``random_blocks``). The key State advances identically on
every shard, so the same seed gives the same numbers on any mesh.

This module is the top of the package: every draw of ``bs.random`` is a
method of ``RandomState``, listed in its class and delegating to the
function (the one draw path, ``draw.py``), which reaches ``RandomState``
and the default stream through the hook ``draw.RANDOM_STATE``, filled here.
"""

from __future__ import annotations

import operator
import threading
from typing import Any, Callable

import jax

from brainshard._core import compat
from brainshard._core.program.held import flush_unheld
from brainshard._core.state.state import State
from brainshard._core.threads import frame_stack, outside_frames, slots_locked
from brainshard._simulation.random import discrete, draw, extra_api, samplers
from brainshard._simulation.random.draw import RANDOM_STATE, _shard_index
from brainshard._simulation.random.params import as_key

__all__ = ["RandomState", "default_state", "seed", "split_key",
           "DEFAULT_SEED"]


def _draws(fun: Callable) -> Callable:
  """The draw ``fun`` of ``bs.random`` as a method drawing from this state."""
  def method(self, *args, **kwargs):
    # key= draws from that key instead, leaving this state as it is
    # (brainstate's methods take it too)
    if kwargs.get("key") is None:
      kwargs["key"] = self
    return fun(*args, **kwargs)
  method.__name__ = method.__qualname__ = fun.__name__
  method.__doc__ = (f"``bs.random.{fun.__name__}`` drawing from this state "
                    "(or from ``key=`` when given).")
  return method


class RandomState(State):
  """A State holding a PRNG key; every draw advances it.

  Args:
    seed_or_key: an int seed, a typed key (``jax.random.key``) or a raw
      ``uint32`` key (``jax.random.PRNGKey``, stored as a typed key).
    name: an optional name for errors and reprs.

  Every draw of :mod:`brainshard.random` is also a method, drawing from
  this state (``rng.normal(size=3)``).
  Draws from several threads are safe: each advances the key exactly once,
  so no two draws share a key, and the set of keys drawn is the one that as
  many draws in one thread would give.

  Example:
    >>> import brainshard as bs
    >>> rng = bs.RandomState(0)
    >>> a = rng.normal(size=3)
    >>> b = rng.normal(size=3)   # the key advanced: fresh numbers
    >>> bool((a != b).all())
    True
    >>> rng.seed(0); bool((rng.normal(size=3) == a).all())
    True
  """

  vmap_shared = True  # bs.vmap members share the key (each folds in its index)

  def __init__(self, seed_or_key: Any = 0, name: str | None = None):
    super().__init__(as_key(seed_or_key, "RandomState"), name=name)

  def __repr__(self) -> str:
    flush_unheld()  # a program's held results first (not a lend: a read)
    value = self._value
    if isinstance(value, jax.Array) and not compat.is_traced(value):
      # the key itself (its data shows the seed), not only its type
      name = "" if self.name is None else f"name={self.name!r}, "
      return f"RandomState({name}key={value})"
    return super().__repr__()

  def seed(self, seed_or_key: Any = None) -> None:
    """Restarts the stream from a seed or key (a State write); without one,
    from a fresh nondeterministic seed."""
    key = as_key(seed_or_key, f"{self.label()}.seed")
    # not between another thread's read and write of the key
    with slots_locked():
      self.value = key

  def split_key(self, n: int | None = None) -> jax.Array:
    """A fresh key (or ``n`` keys), advancing this state.

    Inside ``bs.shard_map`` the key differs on every shard (it is folded
    with the shard's index, unlike a draw, which takes its block of the
    unsharded draw).
    """
    n = _count(n)
    sub = self._next_key()
    index = _shard_index()
    if index is not None:
      sub = jax.random.fold_in(sub, index)
    return sub if n is None else jax.random.split(sub, n)

  def _next_key(self) -> jax.Array:
    """The key of one draw, advancing the state (the same on every shard)."""
    if frame_stack():  # traced: the frame records the read and the write
      return self._advance()
    # Eager draws from several threads must not read the same key. The
    # slots' guard, not a lock of our own: it also keeps out a top-level
    # bs.jit call that draws, from reading this key to writing the next.
    with slots_locked():
      return self._advance()

  def _advance(self) -> jax.Array:
    key, sub = jax.random.split(self.value)
    self.value = key
    return sub

  # -- every draw of bs.random, from this state ---------------------------

  # the core draws (draw.py)
  normal = _draws(draw.normal)
  uniform = _draws(draw.uniform)
  bernoulli = _draws(draw.bernoulli)
  poisson = _draws(draw.poisson)
  randint = _draws(draw.randint)
  from_table = _draws(draw.from_table)

  # continuous samplers (samplers.py)
  standard_normal = _draws(samplers.standard_normal)
  standard_exponential = _draws(samplers.standard_exponential)
  standard_gamma = _draws(samplers.standard_gamma)
  standard_cauchy = _draws(samplers.standard_cauchy)
  standard_t = _draws(samplers.standard_t)
  exponential = _draws(samplers.exponential)
  gamma = _draws(samplers.gamma)
  beta = _draws(samplers.beta)
  chisquare = _draws(samplers.chisquare)
  lognormal = _draws(samplers.lognormal)
  laplace = _draws(samplers.laplace)
  logistic = _draws(samplers.logistic)
  gumbel = _draws(samplers.gumbel)
  pareto = _draws(samplers.pareto)
  weibull = _draws(samplers.weibull)
  truncated_normal = _draws(samplers.truncated_normal)
  multivariate_normal = _draws(samplers.multivariate_normal)
  dirichlet = _draws(samplers.dirichlet)

  # discrete, combinatorial and convenience draws (discrete.py)
  rand = _draws(discrete.rand)
  randn = _draws(discrete.randn)
  random = _draws(discrete.random)
  random_sample = _draws(discrete.random_sample)
  choice = _draws(discrete.choice)
  permutation = _draws(discrete.permutation)
  shuffle = _draws(discrete.shuffle)
  binomial = _draws(discrete.binomial)
  multinomial = _draws(discrete.multinomial)
  categorical = _draws(discrete.categorical)
  geometric = _draws(discrete.geometric)
  negative_binomial = _draws(discrete.negative_binomial)
  hypergeometric = _draws(discrete.hypergeometric)
  rand_like = _draws(discrete.rand_like)
  randn_like = _draws(discrete.randn_like)
  randint_like = _draws(discrete.randint_like)

  # numpy.random's rarer samplers and brainstate's extras (extra_api.py)
  f = _draws(extra_api.f)
  noncentral_chisquare = _draws(extra_api.noncentral_chisquare)
  noncentral_f = _draws(extra_api.noncentral_f)
  power = _draws(extra_api.power)
  rayleigh = _draws(extra_api.rayleigh)
  triangular = _draws(extra_api.triangular)
  wald = _draws(extra_api.wald)
  logseries = _draws(extra_api.logseries)
  zipf = _draws(extra_api.zipf)
  vonmises = _draws(extra_api.vonmises)
  random_integers = _draws(extra_api.random_integers)
  ranf = _draws(extra_api.ranf)
  sample = _draws(extra_api.sample)
  t = _draws(extra_api.t)
  maxwell = _draws(extra_api.maxwell)
  loggamma = _draws(extra_api.loggamma)
  weibull_min = _draws(extra_api.weibull_min)
  orthogonal = _draws(extra_api.orthogonal)


# ----------------------------------------------------------------------------
# The default state


_default: RandomState | None = None
_default_lock = threading.Lock()
DEFAULT_SEED = 0


def default_state() -> RandomState:
  """The RandomState that draws without ``key=`` use.

  It is created on first use (so importing brainshard starts no JAX backend)
  from seed 0, the same on every process of a multi-controller run; call
  :func:`seed` to choose another.
  """
  global _default
  if _default is None:
    with _default_lock:
      if _default is None:
        _default = _make_default()
  return _default


def _make_default() -> RandomState:
  # Possibly first used while a transform traces: the default state must
  # still live at top level (not be local to that transform) with a
  # concrete key.
  with outside_frames(), compat.eager():
    return RandomState(DEFAULT_SEED, name="default")


def seed(seed_or_key: Any = None) -> None:
  """Seeds the default RandomState (an int, a typed key or a raw key);
  ``seed()`` draws a fresh nondeterministic seed from ``os.urandom``.

  Example:
    >>> import brainshard as bs
    >>> bs.random.seed(42); a = bs.random.uniform(size=2)
    >>> bs.random.seed(42); b = bs.random.uniform(size=2)
    >>> bool((a == b).all())
    True
  """
  default_state().seed(seed_or_key)


def _count(n: Any) -> int | None:
  """``n`` keys to split: None, or an integer >= 1 (numpy ints too)."""
  if n is None:
    return None
  n = operator.index(n)  # TypeError for a float
  if n < 1:
    raise ValueError(f"split_key: n must be >= 1, got {n}.")
  return n


def split_key(n: int | None = None, key: Any = None) -> jax.Array:
  """A fresh key (or ``n`` keys) from the default RandomState (or ``key``)."""
  n = _count(n)
  if key is None:
    return default_state().split_key(n)
  if isinstance(key, RandomState):
    return key.split_key(n)
  k = as_key(key, "bs.random.split_key")
  return k if n is None else jax.random.split(k, n)


# The draw path (below this module) reaches RandomState through this hook.
RANDOM_STATE.cls = RandomState
RANDOM_STATE.default = default_state
