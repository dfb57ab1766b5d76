"""The product's settings, on a Redis database of the test suite's own.

As Django runs the suite on a test database beside the configured one, the suite runs
on another database of REDIS_URL's server (15, or 14 where REDIS_URL names 15) and
empties it when the session starts (tests/conftest.py): what a previous run left there
(rate-limit windows, admission leases, heartbeats) is keyed by ids that a new test
database hands out again. Processes the suite starts get this REDIS_URL and the
product's own settings module.
"""

import importlib
import os
import secrets
from urllib.parse import urlsplit, urlunsplit

# The suite runs in development mode, as `make test` sets it, also when pytest is run directly.
os.environ.setdefault("DEBUG", "true")
# The engines the suite starts (its own, and those of the processes it runs) run eager: compiling
# costs about two minutes at a first start, and the suite starts engines several times. What
# compiling changes is measured by `make bench` (docs/benchmarks.md), not asserted here.
os.environ.setdefault("INFERENCE_ENFORCE_EAGER", "true")
# The suite's embedding engines run the float model, whose vector of a text is the same in any pass,
# so a test can compare a stored vector with its text's own; test_embedding_quantized starts the int8
# engine (the product's default on CPU) beside it and checks it against the float one.
os.environ.setdefault("EMBEDDING_QUANTIZE", "false")

from chatsite import settings as product
from harness.processes import free_port

# Without REDIS_URL the suite starts the bundled Redis, as `make run` does, on a free port
# of its own: not the fixed port of `make run`, which another suite or a running product on
# the same machine may hold.
TEST_BUNDLED_REDIS = "REDIS_URL" not in os.environ
if TEST_BUNDLED_REDIS:
    # With a password of its own, as `make run`'s has.
    os.environ["REDIS_URL"] = f"redis://:{secrets.token_urlsafe(16)}@127.0.0.1:{free_port()}/0"


# The embedding engine the suite starts for the tests that need it (tests/conftest.py,
# `embedding_engine`), on a free port of its own: the processes the suite starts find it there.
os.environ["EMBEDDING_URL"] = f"http://127.0.0.1:{free_port()}"


def _test_database(url: str) -> str:
    parts = urlsplit(url)
    configured = parts.path.strip("/") or "0"
    return urlunsplit(parts._replace(path="/14" if configured == "15" else "/15"))


# Read again with the suite's REDIS_URL, so everything made from it (the socket notices,
# the Celery broker) follows.
# os.environ's, not product.REDIS_URL: chatsite.settings was read above, before the bundled
# Redis's free port was chosen, and holds `make run`'s fixed default.
os.environ["REDIS_URL"] = _test_database(os.environ.get("REDIS_URL") or product.REDIS_URL)
importlib.reload(product)

from chatsite.settings import *  # noqa: E402, F403

# This process has its settings now; the processes it starts (daphne, Celery, manage.py)
# are the product's, on the suite's REDIS_URL.
os.environ["DJANGO_SETTINGS_MODULE"] = "chatsite.settings"
