"""Networks on brainshard: delivery, delays, populations (``bs.models``).

The delivery half of the models layer (connectivity rules live beside it):

Example:
  >>> import brainshard.models as models
  >>> models.delay_steps([0.1, 0.15, 1.5], 0.1).tolist()
  [1, 2, 15]
"""

from brainshard._models.delivery import deliver, delay_steps, ring_length
from brainshard._models.delivery_testing import index_from_arrays
from brainshard._models.events import fired_ids, first_fired
from brainshard._models.exchange import Delivery, block_spikes, unblock_spikes
from brainshard._models.index import SynapseIndex
from brainshard._models.layout import Layout
from brainshard._models.population import (
    Population, counts_to_rates, population_counts, population_ids,
    population_rates, population_values, split_spikes)

__all__ = [
    "Layout", "SynapseIndex", "Delivery", "block_spikes", "unblock_spikes",
    "deliver", "delay_steps",
    "ring_length", "fired_ids", "first_fired", "index_from_arrays",
    "Population", "population_values", "population_ids", "split_spikes",
    "population_rates", "population_counts", "counts_to_rates",
]
