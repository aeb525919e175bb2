"""NEST's stimulation devices as pure per-step emitters (see ``base.py``).

``DEVICES`` maps each NEST model name to its class.

Example:
  >>> from brainshard._models.devices import DEVICES
  >>> sorted(DEVICES)
  ['dc_generator', 'noise_generator', 'poisson_generator', 'spike_generator', 'step_current_generator']
  >>> DEVICES['poisson_generator'](rate=8.0).params['rate']
  8.0
"""

from brainshard._models.devices.base import Device
from brainshard._models.devices.currents import DcGenerator, StepCurrentGenerator
from brainshard._models.devices.noise import NoiseGenerator
from brainshard._models.devices.poisson import PoissonGenerator
from brainshard._models.devices.spikes import SpikeGenerator

__all__ = ["Device", "PoissonGenerator", "DcGenerator", "NoiseGenerator",
           "StepCurrentGenerator", "SpikeGenerator", "DEVICES"]

DEVICES: dict[str, type[Device]] = {
    cls.nest_name: cls
    for cls in (PoissonGenerator, DcGenerator, NoiseGenerator,
                StepCurrentGenerator, SpikeGenerator)}
