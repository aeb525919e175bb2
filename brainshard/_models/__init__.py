"""Networks on the public layers: population layout, connectivity, delivery.

This layer sits above the core, the transforms and the simulation tools and
uses only their public interfaces (``import brainshard`` names), never the
core's private ones.
"""
