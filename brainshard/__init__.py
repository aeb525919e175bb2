"""brainshard: JAX transforms for plain Python functions that use global States."""

from brainshard._state import (
    LongTermState, ParamState, ShortTermState, State, StateTraceError)
from brainshard._stateful import StatefulFunction
from brainshard._jit import jit
from brainshard._shard_map import shard_map

__version__ = "0.1.0"
