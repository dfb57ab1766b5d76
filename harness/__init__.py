"""What the test suite and the benchmarks share: the product's processes started as `make run` starts
them, waiting for a condition, and the stand-in engine."""
