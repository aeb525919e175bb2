"""`bs.shard_map`: the plan, the per-shard frames, eager placement, error messages."""
