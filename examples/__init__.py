"""brainshard's examples, one module or package each, run from the
repository root with ``python -m examples.NAME --help``:

- ``cuba``: the CUBA/COBA benchmark network, sharded (README's demo).
- ``spiking_demo``: a small LIF network, ``bs.jit(bs.shard_map(step))``
  driven step by step.
- ``ensemble``: a parameter sweep with ``bs.vmap``.
- ``train_snn``: training a spiking network with ``bs.grad`` and optax.
- ``two_areas``: two areas on two sub-meshes (``bs.task``).
- ``microcircuit``: the Potjans & Diesmann (2014) cortical microcircuit,
  scaled, with its NEST reference (``nest_reference``; docs/microcircuit.md).
- ``brunel``: Brunel's (2000) model A as NEST's ``brunel_delta_nest``
  example writes it, on ``bm.Network``, in the paper's four regimes, with
  NEST's statistics of it (``nest_reference.json``; docs/brunel.md).
- ``stdp_network``: a recurrent network whose E -> E synapses
  (``stdp_synapse``) learn, beside NEST's weights for the same synapses
  (docs/plasticity.md).
- ``learn_sparse``: a sparse 10,000-neuron network with per-synapse delays
  trained by gradient on scikit-learn's digits (docs/training.md).
- ``scaleout``: one script from one device to many processes.
- ``ei_brainstate`` / ``ei_brainshard``: a brainstate model and its port
  (docs/migrating-from-brainstate.md); ``ei_data`` the network both build.

Every example takes ``--devices N`` (faking N CPU devices itself), gives
durations in seconds of simulated time, and writes its files into
``results/`` (git-ignored). Other modules import them as a library
(``from examples import cuba``); nothing edits ``sys.path``.
"""
