"""Saving and restoring States on disk."""
