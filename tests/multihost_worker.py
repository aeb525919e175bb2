"""One process of the multi-process tests (started by brainshard.launch).

Usage: python tests/multihost_worker.py {all,fail}

Each scenario checks its results inside every process and prints
``OK <scenario>``; tests/test_multihost.py launches 2 processes x 4 CPU
devices and checks that both processes printed every line.
"""

import sys


def psum_step(bs, jax, np, mesh):
  """A sharded stateful step with a psum; the State is written across both
  processes and comes back as a global array."""
  from jax.sharding import PartitionSpec as P
  v = bs.State(np.arange(16.0, dtype=np.float32), "v", axes=("neuron",))
  with bs.axis_rules({"neuron": "x"}):
    bs.place(v, mesh)  # every process holds the same host value

    @bs.shard_map(mesh=mesh, in_specs=P(), out_specs=P())
    def step(scale):
      v.value = v.value * scale
      return jax.lax.psum(v.value.sum(), "x")

    out = step(2.0)
  assert not v.value.is_fully_addressable
  assert v.sharding.spec == P("x"), v.sharding
  for shard in v.value.addressable_shards:  # this process's part, in place
    np.testing.assert_allclose(
        shard.data, 2 * np.arange(16.0)[shard.index])
  np.testing.assert_allclose(bs.gather(v), 2 * np.arange(16.0))
  np.testing.assert_allclose(bs.gather(out), 2 * np.arange(16.0).sum())
  try:
    np.asarray(v.value)
  except RuntimeError as e:
    assert "process_allgather" in str(e), e
  else:
    raise AssertionError("reading a multi-process value to host should fail")


def simulation(bs, jax, np, mesh):
  """A rate network whose weights are created in their shards, run for
  several steps by a Python loop of bs.jit(bs.shard_map(step)); compared
  with NumPy on the gathered weights."""
  from jax.sharding import PartitionSpec as P
  n, steps, dt = 32, 12, 0.1
  rules = {"neuron": "x"}

  @bs.sharded_init(mesh=mesh, axis_rules=rules)
  def init(key):
    return (bs.ParamState(jax.random.normal(key, (n, n)) / n, "W",
                          axes=("neuron", None)),
            bs.ShortTermState(jax.numpy.ones(n), "r", axes=("neuron",)))

  W, r = init(jax.random.key(0))
  assert [s.data.shape for s in W.value.addressable_shards] == [(4, n)] * 4
  traces = []

  @bs.jit
  @bs.shard_map(mesh=mesh, in_specs=P(), out_specs=P(), axis_rules=rules)
  def step(dt):
    traces.append(1)
    full = jax.lax.all_gather(r.value, "x", tiled=True)
    r.value = r.value + dt * (-r.value + jax.numpy.tanh(W.value @ full))
    return jax.lax.pmean(r.value.mean(), "x")

  for _ in range(steps):
    # Waiting for each step keeps JAX 0.10's CPU (gloo) runtime from
    # deadlocking with dozens of cross-process steps in flight; see
    # docs/multihost.md.
    jax.block_until_ready(step(dt))
  n_traces = len(traces)
  mean = step(dt)
  assert len(traces) == n_traces, "a repeated call traced again"

  w, ref = bs.gather(W), np.ones(n, np.float32)
  for _ in range(steps + 1):
    ref = ref + dt * (-ref + np.tanh(w @ ref))
  np.testing.assert_allclose(bs.gather(r), ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bs.gather(mean), ref.mean(), rtol=1e-5)


def for_loop_simulation(bs, jax, np, mesh):
  """The same kind of rate network, the whole run compiled into one
  bs.jit(bs.for_loop(bs.shard_map(step))) across both processes; checked
  against NumPy and against the per-step outputs the loop stacks."""
  from jax.sharding import PartitionSpec as P
  n, steps, dt = 32, 20, 0.1
  W = bs.ParamState(np.eye(n, dtype=np.float32) * 0.5, "W", spec=P("x", None))
  r = bs.ShortTermState(np.linspace(-1, 1, n, dtype=np.float32), "r",
                        spec=P("x"))
  bs.place([W, r], mesh)

  @bs.shard_map(mesh=mesh, in_specs=P(), out_specs=P())
  def step(drive):
    full = jax.lax.all_gather(r.value, "x", tiled=True)
    r.value = r.value + dt * (-r.value + jax.numpy.tanh(W.value @ full) + drive)
    return jax.lax.psum(r.value.sum(), "x")

  drives = np.linspace(0.0, 0.2, steps, dtype=np.float32)
  sums = bs.jit(lambda d: bs.for_loop(step, d))(drives)
  w, ref, ref_sums = 0.5 * np.eye(n), np.linspace(-1, 1, n), []
  for d in drives:
    ref = ref + dt * (-ref + np.tanh(w @ ref) + d)
    ref_sums.append(ref.sum())
  np.testing.assert_allclose(bs.gather(r), ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bs.gather(sums), ref_sums, rtol=1e-5, atol=1e-5)
  assert r.sharding.spec == P("x"), r.sharding


def process_local(bs, jax, np, mesh):
  """Each process places its own part; a shard_map writes it with P('x')."""
  from jax.sharding import NamedSharding, PartitionSpec as P
  pid = jax.process_index()
  s = bs.State(np.full((4, 2), pid, np.float32), "s", spec=P("x"))
  bs.place(s, mesh, from_process_local=True)
  assert s.value.shape == (8, 2), s.value.shape

  @bs.shard_map(mesh=mesh, out_specs=P("x"))
  def add_index():
    s.value = s.value + jax.lax.axis_index("x").astype(np.float32)
    return s.value[:, 0]

  col = add_index()
  expected = np.repeat([0.0, 1.0], 4)[:, None] + np.arange(8)[:, None]
  np.testing.assert_allclose(bs.gather(s), np.broadcast_to(expected, (8, 2)))
  np.testing.assert_allclose(bs.gather(col), expected[:, 0])
  assert s.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 2)
  bs.place(s, mesh, specs=P())  # global -> global: now whole on every device
  assert s.value.addressable_shards[0].data.shape == (8, 2)
  np.testing.assert_allclose(bs.gather(s), np.broadcast_to(expected, (8, 2)))


def replicated_key(bs, jax, np, mesh):
  """A PRNG-key State placed from host data on every process, then used."""
  from jax.sharding import PartitionSpec as P
  key = bs.State(jax.random.key(42), "key")
  noise = bs.State(np.zeros(8, np.float32), "noise", spec=P("x"))
  bs.place([key, noise], mesh)

  @bs.shard_map(mesh=mesh)
  def draw():
    k = jax.random.fold_in(key.value, jax.lax.axis_index("x"))
    noise.value = jax.random.normal(k, noise.value.shape)

  draw()
  got = bs.gather(noise)
  want = np.concatenate([
      np.asarray(jax.random.normal(jax.random.fold_in(jax.random.key(42), i),
                                   (1,))) for i in range(8)])
  np.testing.assert_allclose(got, want, rtol=1e-6)
  table = bs.describe([key, noise])
  assert table[1].bytes_per_device == 4 and table[1].devices == 8, table


def submesh_tasks(bs, jax, np, mesh):
  """Two tasks on sub-meshes that span both processes exchange arrays (each
  process moves its own blocks); meshes that would need a transfer between
  processes are a clear error."""
  import jax.numpy as jnp
  from jax.sharding import Mesh, PartitionSpec as P
  a, b = bs.split_mesh(jax.devices(), (4, 4))
  for m in (a, b):  # each half holds two devices of each process
    assert sorted(d.process_index for d in m.devices.flat) == [0, 0, 1, 1]
  va = bs.sharded_init(lambda: bs.State(jnp.arange(8.0), "va", spec=P("x")),
                       mesh=a)()
  vb = bs.sharded_init(lambda: bs.State(jnp.ones(8), "vb", spec=P("x")),
                       mesh=b)()

  def add():
    def f(d):
      va.value = va.value + d
      return va.value
    return f

  def mul(d):
    vb.value = vb.value * d
    return vb.value
  ta = bs.task(add(), mesh=a, in_specs=P("x"), out_specs=P("x"))
  tb = bs.task(mul, mesh=b, in_specs=P("x"), out_specs=P("x"))
  out_b = vb.value
  with jax.transfer_guard_device_to_host("disallow"):
    for _ in range(3):
      out_a = ta(out_b)
      out_b = tb(out_a)
  want_a, want_b = np.arange(8.0), np.ones(8)
  for _ in range(3):
    want_a = want_a + want_b
    want_b = want_b * want_a
  np.testing.assert_array_equal(bs.gather(va), want_a)
  np.testing.assert_array_equal(bs.gather(vb), want_b)
  # Sub-meshes of one process each: moving between them crosses processes.
  own = [d for d in jax.devices() if d.process_index == 0]
  other = [d for d in jax.devices() if d.process_index == 1]
  m0, m1 = Mesh(np.array(own), ("x",)), Mesh(np.array(other), ("x",))
  x1 = bs.sharded_init(lambda: bs.State(jnp.ones(8), "x1", spec=P("x")),
                       mesh=m1)()
  t0 = bs.task(lambda d: d * 2, mesh=m0, in_specs=P("x"), out_specs=P("x"))
  try:
    t0(x1.value)
  except ValueError as e:
    assert "cannot reach devices" in str(e), e
  else:
    raise AssertionError("a transfer between processes should be an error")


def fail(bs, jax, np, mesh):
  """Process 1 dies before a collective that process 0 is already in."""
  from jax.sharding import PartitionSpec as P
  if jax.process_index() == 1:
    raise ValueError("deliberate failure in process 1")
  v = bs.State(np.ones(8, np.float32), "v", spec=P("x"))
  bs.place(v, mesh)
  f = bs.shard_map(lambda: jax.lax.psum(v.value.sum(), "x"), mesh=mesh)
  print("process 0 entering a collective", flush=True)
  bs.gather(f())
  raise AssertionError("process 0 should never get past the collective")


SCENARIOS = {"all": [psum_step, simulation, for_loop_simulation,
                     process_local, replicated_key, submesh_tasks],
             "fail": [fail]}


def main(which: str) -> None:
  import brainshard as bs
  assert bs.init_distributed(), "run me with brainshard.launch"
  import jax
  import numpy as np
  assert jax.process_count() == 2 and jax.local_device_count() == 4
  mesh = jax.make_mesh((8,), ("x",))
  chosen = SCENARIOS.get(which) or [globals()[name] for name in which.split(",")]
  for scenario in chosen:
    scenario(bs, jax, np, mesh)
    print(f"OK {scenario.__name__}", flush=True)


if __name__ == "__main__":
  main(sys.argv[1])
