"""How the test suite and the benchmarks start the product's processes: as `make run` does."""
