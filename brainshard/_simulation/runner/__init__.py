"""Long runs: a stateful step advanced in compiled chunks, interruptible and resumable."""
