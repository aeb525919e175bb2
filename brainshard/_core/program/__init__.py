"""The compiled program and its one call path: donation, placement, held results, the generated call."""
