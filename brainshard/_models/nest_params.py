"""A NEST model's parameters by NEST's names: the one check of a name a
model does not have, shared by neurons, devices, synapses and recorders.

Example:
  >>> from brainshard._models.nest_params import refuse_unknown
  >>> refuse_unknown('iaf_psc_exp', {'tau_m': 10.0}, {'tau_m': 5.0})
  >>> refuse_unknown('iaf_psc_exp', {'tau_m': 10.0}, {'tau_syn': 5.0})
  Traceback (most recent call last):
  ...
  ValueError: iaf_psc_exp: unknown parameter(s) ['tau_syn']; its parameters are ['tau_m'] (NEST's names).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["refuse_unknown"]


def refuse_unknown(nest_name: str, defaults: Iterable[str],
                   params: Mapping[str, Any]) -> None:
  """Raises naming every key of ``params`` that is not in ``defaults``."""
  unknown = sorted(set(params) - set(defaults))
  if unknown:
    raise ValueError(
        f"{nest_name}: unknown parameter(s) {unknown}; its parameters are "
        f"{sorted(defaults)} (NEST's names).")
