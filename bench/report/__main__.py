"""`python -m bench.report`: docs/benchmarks.md rewritten from the saved results."""

from bench import setup
from bench.report import main

if __name__ == "__main__":
    setup()
    main()
