"""The State: one global slot, its value and signature, its refs, dicts and filters."""
