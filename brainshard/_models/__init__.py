"""Networks on the public layers: population layout, connectivity, delivery.

This layer sits above the core, the transforms, the scale-out tools and the
simulation tools, and uses only the objects ``brainshard`` exports (``State``,
``shard_map``, ``for_loop``, ``gather``, the records), imported from the
modules that define them so that imports point one way: down.
"""
