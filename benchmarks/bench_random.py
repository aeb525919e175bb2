"""What mesh-independent draws cost: ``bs.random`` inside ``bs.shard_map``
against the per-shard draws it replaced.

Before, a draw inside ``bs.shard_map`` was ``jax.random.<sampler>`` at the
per-shard shape from the key folded with the shard index; now each shard
draws its block of the unsharded draw (a block key: threefry counters at
the elements' global indices). Both run here on the same mesh of faked CPU
devices, ``--draws`` draws per compiled call, interleaved, fastest of
``--repeats``; the ratio new / old is printed per sampler. Goal for the
closed-form samplers (normal, uniform, bernoulli, randint, exponential):
<= 1.05. The rejection and count samplers changed algorithm (per-element
keys; exact loops), and their ratio is reported as measured.

Then the small-rate counts (``random_small``): ``poisson(lam)`` and
``binomial(10, 0.3)`` per element against one ``uniform`` per element, on
one device under ``bs.jit`` (``--small-n`` elements, ``--draws`` draws per
call, consumed by a sum), for the table inversion a concrete rate takes
and the exact loop a traced one still runs; the median over ``--rounds``
interleaved rounds of the ratio to the uniform of the same round. Goal:
table <= 1.5 for lam <= 10.

Usage:
  python -m benchmarks random [--devices 8] [--n 131072] [--repeats 7]
  python -m benchmarks random --only small [--small-n 262144]
"""

from __future__ import annotations

from benchmarks._harness import clock, fake_devices, parser

SAMPLERS = {  # name -> (old: jax.random at a key, new: bs.random on a state)
    "normal": (lambda jr, k, s: jr.normal(k, s),
               lambda r, s: r.normal(size=s)),
    "uniform": (lambda jr, k, s: jr.uniform(k, s),
                lambda r, s: r.uniform(size=s)),
    "bernoulli": (lambda jr, k, s: jr.bernoulli(k, 0.3, s),
                  lambda r, s: r.bernoulli(0.3, size=s)),
    "randint": (lambda jr, k, s: jr.randint(k, s, 0, 100),
                lambda r, s: r.randint(100, size=s)),
    "exponential": (lambda jr, k, s: jr.exponential(k, s),
                    lambda r, s: r.exponential(size=s)),
    "gamma": (lambda jr, k, s: jr.gamma(k, 2.0, s),
              lambda r, s: r.gamma(2.0, size=s)),
    "poisson(3)": (None, lambda r, s: r.poisson(3.0, size=s)),
    "binomial(10, .3)": (None, lambda r, s: r.binomial(10, 0.3, size=s)),
}


def _programs(name: str, devices: int, n: int, draws: int):
  import jax
  import jax.numpy as jnp
  from jax.sharding import PartitionSpec as P
  import brainshard as bs
  old_draw, new_draw = SAMPLERS[name]
  mesh = jax.make_mesh((devices,), ("x",))
  rng = bs.RandomState(0)

  def new_body():
    return sum(new_draw(rng, (n,)).astype(jnp.float32).sum()
               for _ in range(draws))[None]

  new = bs.jit(bs.shard_map(new_body, mesh=mesh, in_specs=(), out_specs=P("x")))
  if old_draw is None:  # count samplers: the same exact loop ran before
    return new, None

  def old_body(key):
    total = jnp.zeros(())
    for _ in range(draws):  # split the key, fold in the shard index
      key, sub = jax.random.split(key)
      sub = jax.random.fold_in(sub, jax.lax.axis_index("x"))
      total = total + old_draw(jax.random, sub, (n,)).astype(jnp.float32).sum()
    return total[None], key

  old_sm = jax.jit(jax.shard_map(old_body, mesh=mesh, in_specs=P(),
                                 out_specs=(P("x"), P())))
  state = [jax.random.key(0)]

  def old():
    out, state[0] = old_sm(state[0])
    return out

  return new, old


SMALL_RATES = (0.1, 1.0, 2.4, 5.0, 10.0)


def _small_programs(n: int, draws: int) -> dict:
  """name -> a 0-argument call: one device, ``draws`` draws per call."""
  import jax
  import jax.numpy as jnp
  import brainshard as bs
  rng = bs.RandomState(0)

  def program(draw, *args):
    f = bs.jit(lambda *a: sum(draw(*a).astype(jnp.float32).sum()
                              for _ in range(draws)))
    args = tuple(jnp.float32(a) for a in args)  # traced: the exact loop
    return lambda: f(*args)

  calls = {"uniform": program(lambda: rng.uniform(size=n))}
  for lam in SMALL_RATES:
    calls[f"poisson({lam}) table"] = program(
        lambda lam=lam: rng.poisson(lam, size=n))
    calls[f"poisson({lam}) loop"] = program(
        lambda lam: rng.poisson(lam, size=n), lam)
  calls["binomial(10, .3) table"] = program(
      lambda: rng.binomial(10, 0.3, size=n))
  calls["binomial(10, .3) loop"] = program(
      lambda p: rng.binomial(10, p, size=n), 0.3)
  del jax
  return calls


def small_rates(n: int = 1 << 18, draws: int = 4, rounds: int = 15) -> dict:
  """name -> (wall, cpu): the median ratio to ``uniform`` of each
  small-rate count call, over ``rounds`` interleaved rounds (each call's
  best of 3 per round), in wall time and in the process's CPU time (which
  a busy machine's other processes disturb less)."""
  import numpy as np
  calls = _small_programs(n, draws)
  for f in calls.values():
    f().block_until_ready()
  ratios = {name: [] for name in calls}
  for _ in range(rounds):
    t = {name: (_best(f, 3), _best(f, 3, cpu=True))
         for name, f in calls.items()}
    for name in calls:
      ratios[name].append([a / b for a, b in zip(t[name], t["uniform"])])
  out = {name: tuple(np.median(r, 0).tolist()) for name, r in ratios.items()}
  print(f"small-rate counts vs one uniform per element ({n} elements, "
        f"1 device, median of {rounds} interleaved rounds): wall, CPU",
        flush=True)
  for name, (wall, cpu) in out.items():
    print(f"  {name:24s} {wall:6.2f}x {cpu:6.2f}x", flush=True)
  return out


def _best(f, repeats: int, cpu: bool = False) -> float:
  """The best of ``repeats`` calls: wall seconds, or with ``cpu`` the
  process's CPU seconds."""
  times = []
  for _ in range(repeats):
    with clock() as t:
      f().block_until_ready()
    times.append(t.cpu_s if cpu else t.s)
  return min(times)


def main(argv=None) -> dict:
  p = parser(__doc__)
  p.add_argument("--devices", type=int, default=8, help="faked CPU devices")
  p.add_argument("--n", type=int, default=1 << 17, help="elements per shard")
  p.add_argument("--draws", type=int, default=4, help="draws per call")
  p.add_argument("--repeats", type=int, default=7, help="timed calls each")
  p.add_argument("--only", nargs="*", default=None,
                 help="sampler names, and/or 'small' (the small-rate counts)")
  p.add_argument("--small-n", type=int, default=1 << 18,
                 help="elements per draw for the small-rate counts")
  p.add_argument("--rounds", type=int, default=15,
                 help="interleaved rounds for the small-rate counts")
  args = p.parse_args(argv)
  fake_devices(args.devices)  # before JAX starts: _programs imports it
  results = {}
  names = SAMPLERS if args.only is None else [
      n for n in args.only if n != "small"]
  for name in names:
    new, old = _programs(name, args.devices, args.n, args.draws)
    new().block_until_ready()
    if old is not None:
      old().block_until_ready()
    t_new = t_old = float("inf")
    for _ in range(3):  # interleaved
      t_new = min(t_new, _best(new, args.repeats))
      if old is not None:
        t_old = min(t_old, _best(old, args.repeats))
    ratio = t_new / t_old if old is not None else float("nan")
    results[name] = (t_old, t_new, ratio)
    print(f"{name:18s} old {t_old * 1e3:8.2f} ms  new {t_new * 1e3:8.2f} ms  "
          f"new/old {ratio:5.2f}", flush=True)
  if args.only is None or "small" in args.only:
    results["small"] = small_rates(args.small_n, args.draws, args.rounds)
  return results
