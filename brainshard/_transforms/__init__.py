"""The transforms, each a thin layer over ``brainshard._core``: jit,
shard_map, loops and branches, vmap, autodiff, remat, progress bars."""
