"""One simulation step of an ODE as NEST integrates it: GSL's adaptive RKF45.

NEST's conductance and Hodgkin-Huxley models call GSL's
``gsl_odeiv_evolve_apply`` with the ``rkf45`` stepper and a ``standard``
step control until the neuron has reached the end of the step; the step
size the control proposes last is kept for the next simulation step
(``B_.IntegrationStep_``). :func:`rkf45` is that loop, vectorised over the
neurons of a shard: each neuron has its own time, step size and error test,
and a ``lax.while_loop`` runs until every neuron has reached ``dt`` (a
neuron that has is left alone). Every operation is per neuron, so a
neuron's numbers do not depend on its neighbours or on the number of
devices; only the number of loop turns does (but see ``ode_neuron.py`` on
shards of 1-3 neurons).

Why GSL's scheme rather than fixed RK4 substeps: the same tableau, the
same order of operations, error norm, step rules and carried step size
give NEST's numbers up to rounding (at most 2e-11 mV over a second in
float64, see tests/test_neurons_ode.py), so spike times agree step for
step instead of within a tolerance that a fixed scheme would have to argue
for; and a neuron pays only for the substeps it needs (one per step at
rest, a few around a spike).

Example:
  >>> import jax.numpy as jnp
  >>> from brainshard._models.neurons.odeint import rkf45
  >>> decay = lambda y, aux: (-y[0] / 10.0,)    # dV/dt = -V / tau
  >>> (v,), h, _ = rkf45(decay, (jnp.ones(2),), jnp.full(2, 0.1), 0.1,
  ...                    eps_abs=1e-3)
  >>> round(float(v[0]), 6), round(float(jnp.exp(-0.01)), 6)
  (0.99005, 0.99005)
  >>> h.tolist() == [0.5, 0.5]                   # 5x: the error was tiny
  True
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["rkf45"]

# GSL's ode-initval/rkf45.c: Fehlberg's 4(5) pair. Row i of _A makes stage
# i from the stages before it (row 0 is the start, y itself); _C gives the
# 5th-order result and _EC the difference 5th - 4th order (the error).
_A = np.zeros((6, 6))
_A[1, :1] = (1 / 4,)
_A[2, :2] = (3 / 32, 9 / 32)
_A[3, :3] = (1932 / 2197, -7200 / 2197, 7296 / 2197)
_A[4, :4] = (8341 / 4104, -32832 / 4104, 29440 / 4104, -845 / 4104)
_A[5, :5] = (-6080 / 20520, 41040 / 20520, -28352 / 20520, 9295 / 20520,
             -5643 / 20520)
_C = (902880 / 7618050, 0.0, 3953664 / 7618050, 3855735 / 7618050,
      -1371249 / 7618050, 277020 / 7618050)
_EC = (1 / 360, 0.0, -128 / 4275, -2197 / 75240, 1 / 50, 2 / 55)
# gsl_odeiv_step_order(rkf45) and the standard control's safety factor.
_ORDER = 5
_SAFETY = 0.9


def _combine(coeffs, ks):
  """``c0*k0 + c1*k1 + ...`` summed left to right as GSL sums, ``[d, n]``.
  A zero coefficient adds an exact 0, so GSL's skipped terms change
  nothing."""
  out = coeffs[0] * ks[0]
  for j in range(1, len(ks)):
    out = out + coeffs[j] * ks[j]
  return out


def _fehlberg(f, y, aux, h):
  """One RKF45 step of size ``h`` [n] of ``y`` [d, n]: (y(t+h), the error
  estimate). The six stages run in a loop, so ``f`` is compiled once (an
  unrolled step took 4x longer to compile for HhPscAlpha)."""
  dtype = y.dtype
  a = jnp.asarray(_A, dtype)

  def stage(i, ks):
    k = f(y + h * _combine(a[i], ks), aux)
    return ks.at[i].set(k)

  # zeros_like (not zeros): inside shard_map the buffer varies as y does
  ks = jnp.zeros_like(jnp.broadcast_to(y, (6,) + y.shape))
  ks = jax.lax.fori_loop(0, 6, stage, ks)
  y_new = y + h * _combine(_C, ks)
  return y_new, h * _combine(_EC, ks)


def _rmax(y, err, yp, h, eps_abs, eps_rel, a_y, a_dydt):
  """GSL's standard control: the largest |error| / tolerance over the
  components ``[d, n] -> [n]``, at least DBL_MIN; a NaN ratio is skipped as
  GSL_MAX_DBL skips it."""
  scale = a_y * jnp.abs(y)
  if a_dydt:
    scale = scale + a_dydt * jnp.abs(h * yp)
  ratio = jnp.abs(err) / jnp.abs(eps_rel * scale + eps_abs)
  rmax = jnp.full_like(h, jnp.finfo(h.dtype).tiny)
  for r in ratio:
    rmax = jnp.where(r > rmax, r, rmax)
  return rmax


def rkf45(f: Callable, y: tuple, h: Any, dt: float, aux: Any = None, *,
          eps_abs: float, eps_rel: float = 0.0, a_y: float = 1.0,
          a_dydt: float = 0.0, event: Callable | None = None):
  """Advance ``y`` by ``dt`` as NEST's ``while (t < step)`` loop over
  ``gsl_odeiv_evolve_apply`` does.

  Args:
    f: the dynamics, ``f(y, aux) -> dy/dt`` (tuples of ``[n]`` arrays).
    y: the state, a tuple of ``[n]`` arrays (one dtype).
    h: ``[n]`` step sizes carried from the last call (NEST's
      ``IntegrationStep_``), positive.
    dt: the simulation step (ms).
    aux: what ``f`` and ``event`` read besides ``y`` (a pytree of ``[n]``
      arrays), carried through the loop.
    eps_abs, eps_rel, a_y, a_dydt: the control
      (``gsl_odeiv_control_standard``: tolerance
      ``eps_abs + eps_rel * (a_y |y| + a_dydt h |dy/dt|)`` per component);
      ``gsl_odeiv_control_y_new(a, r)`` is ``a_y=1, a_dydt=0``,
      ``control_yp_new`` is ``a_y=0, a_dydt=1``.
    event: ``event(y, aux, accepted) -> (y, aux)`` after every loop turn,
      for what a model does between two accepted substeps (aeif's spike and
      reset inside the step); ``accepted [n]`` marks the neurons that just
      took a substep.

  Returns:
    ``(y, h, aux)`` at ``t + dt``, with the step size for the next call.
  """
  dtype = y[0].dtype
  dt = jnp.asarray(dt, dtype)
  use_dydt = a_dydt != 0
  n_vars = len(y)

  def f_stacked(y, aux):  # [d, n] -> [d, n]
    return jnp.stack(f(tuple(y), aux))

  def event_stacked(y, aux, accepted):
    y, aux = event(tuple(y), aux, accepted)
    return jnp.stack(y), aux

  def turn(carry):
    t, h, y, aux = carry
    active = t < dt
    rest = dt - t
    final = h > rest
    h0 = jnp.where(final, rest, h)
    h0 = jnp.where(active, h0, 0.0)  # lanes that are done stand still
    y_new, err = _fehlberg(f_stacked, y, aux, h0)
    yp = f_stacked(y_new, aux) if use_dydt else None
    rmax = _rmax(y_new, err, yp, h0, eps_abs, eps_rel, a_y, a_dydt)
    t_new = jnp.where(final, dt, t + h0)
    # rmax > 1.1: retry with a smaller step (at most 5x smaller), unless it
    # would not move t by one ulp (then GSL keeps the step it took)
    h_dec = h0 * jnp.maximum(_SAFETY / rmax ** (1.0 / _ORDER), 0.2)
    retry = (rmax > 1.1) & (h_dec < h0) & (t_new + h_dec != t_new)
    # rmax < 0.5: the next step grows, at most 5x, never shrinks
    grow = jnp.clip(_SAFETY / rmax ** (1.0 / (_ORDER + 1.0)), 1.0, 5.0)
    h_next = jnp.where(rmax < 0.5, h0 * grow, h0)
    accepted = active & ~retry
    y = jnp.where(accepted, y_new, y)
    t = jnp.where(accepted, t_new, t)
    h = jnp.where(active, jnp.where(retry, h_dec, h_next), h)
    if event is not None:
      y, aux = event_stacked(y, aux, accepted)
    return t, h, y, aux

  t0 = jnp.zeros_like(h)
  _, h, y, aux = jax.lax.while_loop(lambda c: jnp.any(c[0] < dt), turn,
                                    (t0, h, jnp.stack(y), aux))
  return tuple(y[i] for i in range(n_vars)), h, aux
