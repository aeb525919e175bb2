"""Scale-out: placement and sharded init, describe, multi-process runs,
checkpoints, sub-mesh tasks."""
