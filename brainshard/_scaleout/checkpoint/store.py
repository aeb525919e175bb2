"""The on-disk layout of a brainshard checkpoint, written with orbax.

``path`` is a directory::

    path/CURRENT        the name of the current version ("v00000003\\n")
    path/v00000003/     one checkpoint, written and committed by orbax:
        manifest/       JSON: what each State holds, plus the user metadata
        states/         the arrays ({key: [leaf, ...]}, sharded, OCDBT)

A save writes a new version next to the current one (orbax writes it to a
temporary directory and renames it when complete), then replaces ``CURRENT``
atomically (``os.replace``), and only then deletes the older versions. A save
killed at any point therefore leaves ``CURRENT`` naming a complete checkpoint;
the next save deletes what it left (a version never made current, a pointer
file ``.CURRENT.tmp<pid>`` never moved).

Every process of a multi-process run calls the same functions in the same
order; process 0 alone touches ``CURRENT`` and deletes old versions, and
barriers (orbax's, over JAX's distributed runtime) order the steps.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import re
import shutil
import sys
import threading
import warnings
from typing import Any, Callable

import jax

__all__ = ["orbax", "POINTER", "read_pointer", "next_version", "write_pointer",
           "barrier", "save_tree", "restore_manifest", "restore_tree",
           "SaveHandle", "wait_pending"]

POINTER = "CURRENT"
MANIFEST = "manifest"
STATES = "states"
_VERSION = re.compile(r"^v(\d+)")
_TMP_POINTER = f".{POINTER}.tmp"


def orbax() -> Any:
  """``orbax.checkpoint``, imported on first use (an optional extra)."""
  try:
    import orbax.checkpoint as ocp
  except ImportError as e:
    raise ImportError(
        "bs.save_states / bs.restore_states need orbax-checkpoint: "
        "pip install 'brainshard[checkpoint]'") from e
  return ocp


# ----------------------------------------------------------------------------
# Versions and the pointer


def read_pointer(path: str) -> str:
  """The directory of the current version; FileNotFoundError if none."""
  if not os.path.isdir(path):
    raise FileNotFoundError(f"bs.restore_states: no checkpoint at {path!r}.")
  try:
    with open(os.path.join(path, POINTER)) as f:
      name = f.read().strip()
  except FileNotFoundError:
    raise FileNotFoundError(
        f"bs.restore_states: {path!r} holds no complete checkpoint (no "
        f"{POINTER} file; was its first save interrupted?).") from None
  return os.path.join(path, name)


def next_version(path: str) -> str:
  """A version name newer than every one at ``path``, committed or not (so a
  save never reuses the name of a save that was killed half-way)."""
  numbers = [0]
  if os.path.isdir(path):
    for entry in os.listdir(path):
      m = _VERSION.match(entry)
      if m:
        numbers.append(int(m.group(1)))
  return f"v{max(numbers) + 1:08d}"


def write_pointer(path: str, version: str) -> None:
  """Points ``CURRENT`` at ``version`` atomically, then deletes every other
  version and pointer file (old ones and leftovers of interrupted saves)."""
  tmp = os.path.join(path, f"{_TMP_POINTER}{os.getpid()}")
  with open(tmp, "w") as f:
    f.write(version + "\n")
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, os.path.join(path, POINTER))
  _fsync_dir(path)
  for entry in os.listdir(path):
    if _VERSION.match(entry) and entry != version:
      shutil.rmtree(os.path.join(path, entry), ignore_errors=True)
    elif entry.startswith(_TMP_POINTER):  # a save killed before its replace
      try:
        os.remove(os.path.join(path, entry))
      except OSError:
        pass


def _fsync_dir(path: str) -> None:
  try:
    fd = os.open(path, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


_barriers = itertools.count()


def barrier(stage: str) -> None:
  """Waits for every process (a no-op in a single process). Every process
  calls the checkpoint functions in the same order, so the counter gives the
  same unique barrier name everywhere."""
  if jax.process_count() == 1:
    return
  orbax().multihost.sync_global_processes(
      f"brainshard_checkpoint_{next(_barriers)}_{stage}")


# ----------------------------------------------------------------------------
# Saving


_pending: dict[str, "SaveHandle"] = {}
_pending_lock = threading.Lock()
# Failed asynchronous saves nobody has waited for: the next save or restore
# (of any path: a run's checkpoints often go to a new path each time) raises
# the error, and the interpreter reports the rest at exit, so a failed save
# is never silent.
_unreported: dict[str, "SaveHandle"] = {}


def wait_pending(path: str) -> None:
  """Waits for an asynchronous save to ``path`` still in flight; raises the
  error of a save (to any path) that failed and was never waited for."""
  with _pending_lock:
    handle = _pending.get(path) or _unreported.get(path)
  if handle is None:
    with _pending_lock:
      handle = next(iter(_unreported.values()), None)
  if handle is not None:
    handle.wait()


class SaveHandle:
  """An asynchronous save: ``.wait()`` blocks until the checkpoint is
  committed and current (and raises the save's error, if it failed)."""

  def __init__(self, path: str, version: str):
    self.path = path
    self.version = version
    self._thread: threading.Thread | None = None
    self._error: BaseException | None = None

  def done(self) -> bool:
    """Whether the save has finished (committed, or failed)."""
    return self._thread is None or not self._thread.is_alive()

  def wait(self) -> None:
    """Blocks until the checkpoint is committed and ``CURRENT`` names it."""
    if self._thread is not None:
      self._thread.join()
    if self._error is not None:
      with _pending_lock:
        if _unreported.get(self.path) is self:
          del _unreported[self.path]
      if not getattr(self._error, "_bs_noted", False):
        self._error._bs_noted = True
        self._error.add_note(
            f"(raised by the asynchronous bs.save_states of {self.path!r} "
            f"({self.version}), which failed; the previous checkpoint there "
            "is still current. A later bs.save_states or bs.restore_states "
            "that raises this did nothing: call it again.)")
      raise self._error

  def __repr__(self) -> str:
    state = "done" if self.done() else "writing"
    if self._error is not None:
      state = f"failed: {type(self._error).__name__}"
    return f"<bs.save_states {self.path!r} {self.version} ({state})>"

  def _run(self, finish: Callable[[], None]) -> None:
    try:
      finish()
    except BaseException as e:  # re-raised by wait()
      self._error = e
      warnings.warn(
          f"bs.save_states: the asynchronous save of {self.path!r} "
          f"({self.version}) failed: {type(e).__name__}: {e}. The previous "
          "checkpoint is still current; handle.wait(), or else the next "
          "bs.save_states or bs.restore_states (of any path), raises the "
          "error.", RuntimeWarning,
          stacklevel=1)
    finally:
      with _pending_lock:
        if _pending.get(self.path) is self:
          del _pending[self.path]
        if self._error is not None:
          _unreported[self.path] = self


def _finish_saves_at_exit() -> None:
  for handle in list(_pending.values()):
    if handle._thread is not None:
      handle._thread.join()


# A script that ends right after ``save_states(..., block=False)`` must still
# commit it. Joining non-daemon threads at exit is too late: the interpreter
# first shuts down concurrent.futures' executors, which orbax's background
# writes need. Hooks registered later run earlier, so this one (registered
# when the first asynchronous save starts, long after concurrent.futures was
# imported) finishes the saves before that shutdown.
_exit_hook: list[bool] = []


def _finish_saves_before_shutdown() -> None:
  with _pending_lock:
    if _exit_hook:
      return
    _exit_hook.append(True)
  register = getattr(threading, "_register_atexit", None)
  (register or atexit.register)(_finish_saves_at_exit)


@atexit.register
def _report_failed_saves() -> None:
  # Runs after the interpreter joined the (non-daemon) save threads.
  failed = list(_unreported.values())
  for handle in failed:
    hint = ""
    if "shutdown" in str(handle._error):
      hint = (" Python 3.12 and later cannot start the threads orbax writes "
              "with once the interpreter is exiting: call handle.wait() (or "
              "save with block=True) before the script ends.")
    print(f"bs.save_states: the asynchronous save of {handle.path!r} "
          f"({handle.version}) failed and was never waited for: "
          f"{type(handle._error).__name__}: {handle._error}. The previous "
          f"checkpoint is still current.{hint}", file=sys.stderr)
  if failed:
    _exit_failed()


def _exit_failed() -> None:
  """Ends the process with status 1: a script whose last checkpoint was
  lost must not look successful to what ran it (a batch job, a CI step).
  An exit hook cannot change the status (``SystemExit`` raised there is
  ignored), so this leaves with ``os._exit``, after doing what the hooks
  it skips (those registered before this module, JAX's and logging's) are
  there for: JAX's pending effects, the distributed client, the logs."""
  try:
    jax.effects_barrier()
    jax.distributed.shutdown()  # a no-op where it was never initialised
    logging.shutdown()
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def save_tree(path: str, version: str, tree: dict, manifest: dict,
              block: bool) -> SaveHandle:
  """Writes ``tree`` and ``manifest`` as version ``version`` of ``path`` and
  makes it current: now (``block``) or in a background thread."""
  ocp = orbax()
  target = os.path.join(path, version)
  args = ocp.args.Composite(**{
      STATES: ocp.args.PyTreeSave(tree),
      MANIFEST: ocp.args.JsonSave(manifest)})
  handle = SaveHandle(path, version)
  if block:
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckpt:
      ckpt.save(target, args=args)
    _commit(path, version)
    return handle
  # The version's directories are made here, not in orbax's background
  # threads: from Python 3.12 a save left unwaited when the script ends
  # cannot start threads, and a failed background directory creation leaves
  # orbax's other background steps waiting for it (the process then hung for
  # orbax's 300 s coordination timeout before exiting).
  ckpt = ocp.AsyncCheckpointer(
      ocp.CompositeCheckpointHandler(),
      async_options=ocp.options.AsyncOptions(
          create_directories_asynchronously=False))
  try:
    # Returns once the arrays are copied off the devices: later steps (even
    # ones that donate the States' buffers) cannot change what is written.
    ckpt.save(target, args=args)
  except BaseException:
    ckpt.close()
    raise
  commit_stage = next(_barriers)  # reserved here, in call order

  def finish():
    try:
      ckpt.wait_until_finished()
    finally:
      ckpt.close()
    _commit(path, version, commit_stage)

  _finish_saves_before_shutdown()
  handle._thread = threading.Thread(
      target=handle._run, args=(finish,), name=f"bs.save_states {version}")
  with _pending_lock:
    _pending[path] = handle
  handle._thread.start()
  return handle


# How long a process waits at a commit barrier for the others to finish
# writing their shards (a large checkpoint on a slow file system).
BARRIER_TIMEOUT_S = 3600


def _commit(path: str, version: str, stage: int | None = None) -> None:
  """Moves ``CURRENT`` to ``version`` once every process has written it.

  The barriers go through the distributed runtime's key-value store, never
  through the devices: an asynchronous save commits from a background
  thread, and a device collective there (orbax's default barrier) can
  interleave with the main thread's collectives in a different order on
  each process and deadlock them all."""
  multi = jax.process_count() > 1
  name = f"brainshard_checkpoint_{next(_barriers) if stage is None else stage}"
  if multi:
    sync = orbax().multihost.get_barrier_sync_fn()
    sync(key=name + "_written", timeout_ms=BARRIER_TIMEOUT_S * 1000)
  if jax.process_index() == 0:
    write_pointer(path, version)
  if multi:
    sync(key=name + "_current", timeout_ms=BARRIER_TIMEOUT_S * 1000)


# ----------------------------------------------------------------------------
# Restoring


def restore_manifest(directory: str) -> dict:
  ocp = orbax()
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckpt:
    out = ckpt.restore(directory, args=ocp.args.Composite(**{
        MANIFEST: ocp.args.JsonRestore()}))
  return out[MANIFEST]


def restore_tree(directory: str, item: dict, restore_args: dict,
                 partial: bool) -> dict:
  """Reads the arrays of ``item`` (a subset of the saved keys when
  ``partial``), each directly into its target sharding."""
  ocp = orbax()
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as ckpt:
    out = ckpt.restore(directory, args=ocp.args.Composite(**{
        STATES: ocp.args.PyTreeRestore(
            item=item, restore_args=restore_args, partial_restore=partial)}))
  return out[STATES]
