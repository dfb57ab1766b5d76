"""Benchmarks of the product against the raw engine (docs/benchmarks.md).

Run each as `python -m bench.<name>` from the repository root, or all with `make bench`.
They use the product's settings and database: each benchmark's `python -m` entry calls `setup`
before its `main`, so importing one (as the tests do) configures nothing.
"""

import os
import secrets

import django


def setup() -> None:
    """Django configured from the environment for a benchmark's own process and those it starts."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatsite.settings")
    # The web processes a benchmark starts run in production mode (bench.processes.PRODUCTION), which
    # refuses a weak key, and read the sessions this process makes: both take one key from the
    # environment, the one given or a fresh one for this run.
    if len(os.environ.get("SECRET_KEY", "")) < 50:
        os.environ["SECRET_KEY"] = secrets.token_urlsafe(50)
    django.setup()
