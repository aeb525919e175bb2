"""A network in NEST's terms: populations of neuron models, connections,
devices and recorders, simulated on any mesh."""
