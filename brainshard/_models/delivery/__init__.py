"""The sharded synapse index, the push of fired neurons' synapses into ring
buffers, and the spike exchange between shards."""
