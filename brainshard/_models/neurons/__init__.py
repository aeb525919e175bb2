"""NEST's neuron models as pure steps over their state."""
