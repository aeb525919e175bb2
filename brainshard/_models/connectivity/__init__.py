"""Rules that generate each projection's synapses in their target's shard,
and `connect`."""
