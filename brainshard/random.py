"""NumPy-style random draws that work under brainshard transforms.

Draws come from a default :class:`~brainshard.RandomState` unless ``key=``
is given (a RandomState, which advances, or a key array, used as is). Inside
``bs.shard_map`` draws from a RandomState differ on every shard; a key
array passed as ``key=`` is used unchanged on every shard.

Example:
  >>> import brainshard as bs
  >>> bs.random.seed(0)
  >>> x = bs.random.normal(size=(2, 3))
  >>> x.shape
  (2, 3)
"""

from brainshard._simulation.random import (
    DEFAULT_SEED, RandomState, bernoulli, default_state, normal, poisson,
    randint, seed, split_key, uniform)

__all__ = [
    "RandomState", "default_state", "seed", "split_key", "normal", "uniform",
    "bernoulli", "poisson", "randint", "DEFAULT_SEED",
]
