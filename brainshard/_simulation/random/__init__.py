"""`bs.random`: random numbers drawn from States, the same block of the unsharded draw on any mesh."""
