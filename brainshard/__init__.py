"""brainshard: JAX transforms for plain Python functions that use global States."""

from brainshard._state import (
    LongTermState, ParamState, ShortTermState, State, StateTraceError)
from brainshard._stateful import StatefulFunction
from brainshard._jit import jit
from brainshard._shard_map import shard_map
from brainshard._progress import ProgressBar
from brainshard._loops import for_loop, scan, while_loop
from brainshard._cond import cond, switch
from brainshard._random import RandomState
from brainshard import random
from brainshard._axes import axis_rules, current_axis_rules
from brainshard._place import ShardedInit, place, resolve_spec, sharded_init
from brainshard._describe import StateInfo, StateTable, describe, visualize
from brainshard._multihost import gather, init_distributed
from brainshard._chunked import Chunk, ChunkedLoop
from brainshard._monitors import RateMonitor, SpikeMonitor, StateMonitor
from brainshard._records import RateData, Result, SpikeData, TraceData
from brainshard._runner import Runner

__version__ = "0.1.0"

__all__ = [
    # states
    "State", "ParamState", "ShortTermState", "LongTermState",
    "StateTraceError", "RandomState",
    # transforms
    "StatefulFunction", "jit", "shard_map",
    # simulation drivers
    "for_loop", "scan", "while_loop", "cond", "switch", "ProgressBar",
    "random",
    # scale-out
    "axis_rules", "current_axis_rules", "place", "resolve_spec",
    "sharded_init", "ShardedInit", "describe", "visualize", "StateInfo",
    "StateTable", "gather", "init_distributed",
    # long runs: chunks, monitors, records
    "ChunkedLoop", "Chunk", "Runner", "SpikeMonitor", "RateMonitor",
    "StateMonitor", "Result", "SpikeData", "RateData", "TraceData",
]
