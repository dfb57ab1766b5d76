"""What the tests share: clients, the fault-injecting engine, the product's processes as the suite
starts them, and test data. Fixtures stay in tests/conftest.py; these are plain helpers to import."""
