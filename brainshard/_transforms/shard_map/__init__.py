"""`bs.shard_map`: the plan and its map, the per-shard frames and bodies, eager calls and their placement, error messages."""
