"""What a run records, on the device and on the host."""
