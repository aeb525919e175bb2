"""`bs.vmap` and which States it batches."""
