"""Networks on brainshard (``bs.models``): populations on one sharded axis,
connectivity built in each target's shard, and event-driven delivery with
per-synapse weights and delays.

Example:
  >>> import jax, brainshard as bs
  >>> from brainshard import models as bm
  >>> lay = bm.Layout({'E': 80, 'I': 20}, n_shards=2)
  >>> idx = bm.connect([bm.Projection('E', 'I', bm.FixedInDegree(5))],
  ...                  lay, dt=0.1, seed=1, mesh=jax.make_mesh((2,), ('x',)))
  >>> int(idx.count.sum())
  100
  >>> bm.delay_steps([0.1, 0.15, 1.5], 0.1).tolist()
  [1, 2, 15]
"""

from brainshard._models.analysis import (
    plot_populations, population_cv_isi, population_firing_rates)
from brainshard._models.connectivity.connect import connect, synapses
from brainshard._models.delays import delay_steps, ring_length
from brainshard._models.delivery.counts import (
    csr_from_table, deliver_counts, hashed_presynaptic, pull_counts)
from brainshard._models.delivery.push import deliver
from brainshard._models.delivery.from_arrays import index_from_arrays
from brainshard._models.devices import (
    DcGenerator, Device, NoiseGenerator, PoissonGenerator, SpikeGenerator,
    StepCurrentGenerator)
from brainshard._models.connectivity.parameters import (
    Constant, Normal, Parameter, Uniform)
from brainshard._models.delivery.events import fired_ids, first_fired
from brainshard._models.delivery.delivery import Delivery, block_spikes, unblock_spikes
from brainshard._models.delivery.grad import deliver_block
from brainshard._models.delivery.trainable import TrainableDelivery
from brainshard._models.surrogate import ArcTan, FastSigmoid, Sigmoid, spike
from brainshard._models.delivery.index import SynapseIndex
from brainshard._models.layout import Layout
from brainshard._models.network.network import Network
from brainshard._models.network.nodes import NodeCollection
from brainshard._models.network.recorders import Multimeter, SpikeRecorder
from brainshard._models.network.synapses import Synapses
from brainshard._models.network.weights import WeightHistogram, WeightRecorder
from brainshard._models.neurons import (
    AeifCondExp, HhPscAlpha, IafCondAlpha, IafCondExp, IafPscAlpha,
    IafPscDelta, IafPscExp, Izhikevich, NeuronModel, ParrotNeuron)
from brainshard._models.plasticity.model import SynapseModel
from brainshard._models.plasticity.pair_rule import PairRule
from brainshard._models.plasticity.stdp import StdpSynapse
from brainshard._models.plasticity.tsodyks2 import Tsodyks2Synapse
from brainshard._models.population import (
    Population, counts_to_rates, population_counts, population_ids,
    population_rates, population_values, split_spikes)
from brainshard._models.connectivity.projection import Projection
from brainshard._models.connectivity.rules import (
    AllToAll, Explicit, FixedInDegree, FixedOutDegree, FixedTotalNumber,
    OneToOne, PairwiseBernoulli, Rule)

__all__ = [
    # a network in NEST's terms
    "Network", "NodeCollection", "SpikeRecorder", "Multimeter",
    "Layout", "SynapseIndex",
    # plasticity: NEST's synapse models, a user's pair rule, and recording
    # plastic weights
    "SynapseModel", "StdpSynapse", "Tsodyks2Synapse", "PairRule",
    "Synapses", "WeightRecorder", "WeightHistogram",
    # connectivity
    "Projection", "Rule", "FixedInDegree", "FixedOutDegree",
    "PairwiseBernoulli", "FixedTotalNumber", "AllToAll", "OneToOne",
    "Explicit", "Parameter", "Constant", "Normal", "Uniform", "connect",
    "synapses", "index_from_arrays",
    # delivery
    "Delivery", "block_spikes", "unblock_spikes", "deliver", "delay_steps",
    "ring_length", "fired_ids", "first_fired",
    # gradients through delivery: surrogate spikes, trainable weights
    "TrainableDelivery", "deliver_block", "spike", "FastSigmoid", "ArcTan",
    "Sigmoid",
    # integer counts: one uniform weight per receptor
    "hashed_presynaptic", "csr_from_table", "deliver_counts", "pull_counts",
    # populations
    "Population", "population_values", "population_ids", "split_spikes",
    "population_rates", "population_counts", "counts_to_rates",
    # statistics and pictures per population
    "population_firing_rates", "population_cv_isi", "plot_populations",
    # neuron models: NEST's, under CapWords names (``nest_name`` on each)
    "NeuronModel", "IafPscDelta", "IafPscExp", "IafPscAlpha", "Izhikevich",
    "IafCondExp", "IafCondAlpha", "AeifCondExp", "HhPscAlpha",
    "ParrotNeuron",
    # stimulation devices: NEST's (poisson_generator, dc_generator,
    # noise_generator, step_current_generator, spike_generator)
    "Device", "PoissonGenerator", "DcGenerator", "NoiseGenerator",
    "StepCurrentGenerator", "SpikeGenerator",
]
