"""brainshard: JAX transforms for plain Python functions that use global States."""

import os as _os

from brainshard._core import compat as _compat
from brainshard._core.caches import clear_caches
from brainshard._core.compile_cache import compilation_cache
from brainshard._core.errors import StateTraceError
from brainshard._core.state.state import (
    LongTermState, ParamState, ShortTermState, State)
from brainshard._core.state.dict_manager import StateDictManager
from brainshard._core.stateful_function import StatefulFunction
from brainshard._transforms.jit import jit
from brainshard._transforms.shard_map.shard_map import shard_map
from brainshard._transforms.progress import ProgressBar
from brainshard._transforms.loops import for_loop, scan, while_loop
from brainshard._transforms.cond import cond, switch
from brainshard._transforms.cond import ifelse
from brainshard._transforms.loops import bounded_while_loop
from brainshard._transforms.vmap.vmap import vmap
from brainshard._transforms.autodiff.autodiff import (
    grad, hessian, jacfwd, jacrev, jvp, value_and_grad, vjp)
from brainshard._transforms.remat import remat
from brainshard._simulation.random.state import RandomState
from brainshard import random
from brainshard._core.axes import axis_rules, current_axis_rules
from brainshard._scaleout.place import ShardedInit, place, resolve_spec, sharded_init
from brainshard._scaleout.describe import StateInfo, StateTable, describe, visualize
from brainshard._scaleout.task import (
    Task, check_disjoint, run_tasks, split_mesh, task)
from brainshard._scaleout.multihost import gather, init_distributed
from brainshard._scaleout.checkpoint.checkpoint import restore_states, save_states
from brainshard._simulation.runner.chunked import Chunk, ChunkedLoop
from brainshard._simulation.monitors.monitors import RateMonitor, SpikeMonitor, StateMonitor
from brainshard._simulation.monitors.records import RateData, Result, SpikeData, TraceData
from brainshard._simulation.monitors.zarr_store import load_records
from brainshard._simulation.monitors.analysis import cv_isi, firing_rates, mean_cv_isi
from brainshard._simulation.runner.runner import Runner
from brainshard import models  # the models layer: above everything else

__version__ = "0.1.0"

# An error raised while JAX traces a user function points at the user's
# line: brainshard's frames are filtered out like JAX's own
# (JAX_TRACEBACK_FILTERING=off shows them).
_compat.hide_from_tracebacks(_os.path.dirname(_os.path.abspath(__file__)))

# A second run of a script compiles (almost) nothing: JAX's persistent
# compilation cache in the user's cache folder, unless configured or
# switched off (BRAINSHARD_COMPILATION_CACHE=0; docs/compat.md).
from brainshard._core import compile_cache as _compile_cache  # noqa: E402
_compile_cache.enable_by_default()

__all__ = [
    # states
    "State", "ParamState", "ShortTermState", "LongTermState",
    "StateTraceError", "RandomState", "StateDictManager",
    # transforms
    "StatefulFunction", "jit", "shard_map", "vmap", "clear_caches",
    "compilation_cache",
    "grad", "value_and_grad", "vjp", "jvp", "jacrev", "jacfwd", "hessian",
    "remat",
    # simulation drivers
    "for_loop", "scan", "while_loop", "cond", "switch", "ProgressBar",
    "ifelse", "bounded_while_loop",
    "random",
    # scale-out
    "axis_rules", "current_axis_rules", "place", "resolve_spec",
    "sharded_init", "ShardedInit", "describe", "visualize", "StateInfo",
    "StateTable", "gather", "init_distributed", "save_states",
    "restore_states",
    # sub-mesh tasks (MPMD)
    "task", "Task", "split_mesh", "check_disjoint", "run_tasks",
    # long runs: chunks, monitors, records
    "ChunkedLoop", "Chunk", "Runner", "SpikeMonitor", "RateMonitor",
    "StateMonitor", "Result", "SpikeData", "RateData", "TraceData",
    "load_records", "firing_rates", "cv_isi", "mean_cv_isi",
    # networks: populations, connectivity (bs.models.*)
    "models",
]
