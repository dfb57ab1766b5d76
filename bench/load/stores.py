"""The load test's own database and Redis: never the product's unless told so in so many words.

The load test's web processes join the takeover and admission sets of the Redis they use and hand
their answers over when they drain: on the product's Redis they would take production's answers
and slots, and with another database beside it their message ids would collide with production's
streams. So the load test runs on LOADTEST_DATABASE_URL (default: SQLite in DATA_DIR/loadtest/) and
LOADTEST_REDIS_URL (default: a bundled Redis of its own on a free port, started and stopped with
the run), and refuses the product's own (DATABASE_URL, REDIS_URL, or `make run`'s defaults) unless
`--on-product-stores` says so. Imported before Django is set up: it decides what the settings read.
"""

import os
import secrets
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url

from chatsite.env import env_secret
from harness.processes import free_port

FLAG = "--on-product-stores"
# `make run`'s bundled Redis (chatsite.settings), whatever its password.
PRODUCT_REDIS = "redis://127.0.0.1:6380/0"


@dataclass(frozen=True)
class Stores:
    database_url: str
    redis_url: str
    # A bundled Redis of the load test's own, to start for the run.
    own_redis: bool


def data_dir(environ: MutableMapping[str, str]) -> Path:
    return Path(environ.get("DATA_DIR") or Path(__file__).resolve().parents[2] / "var")


def product_stores(environ: MutableMapping[str, str]) -> tuple[str, str]:
    """The database and Redis that the product's settings read from `environ`."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(environ)
        database = env_secret("DATABASE_URL", f"sqlite:///{data_dir(environ) / 'db.sqlite3'}")
        redis = env_secret("REDIS_URL", PRODUCT_REDIS)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return database, redis


LOOPBACK = {"localhost", "127.0.0.1", "::1", ""}


def _host(name: str | None) -> str:
    return "loopback" if (name or "") in LOOPBACK else name


def same_database(a: str, b: str) -> bool:
    """One database, whoever connects to it and however its address is spelled."""
    first, second = dj_database_url.parse(a), dj_database_url.parse(b)
    if "sqlite" in first["ENGINE"] and "sqlite" in second["ENGINE"]:
        return Path(first["NAME"]).resolve() == Path(second["NAME"]).resolve()

    def where(parsed: dict) -> tuple:
        return parsed["ENGINE"], parsed["NAME"], _host(parsed.get("HOST")), int(parsed.get("PORT") or 5432)

    return where(first) == where(second)


def same_redis(a: str, b: str) -> bool:
    """One server, whatever the database number: its pub/sub channels are the server's."""
    first, second = urlsplit(a), urlsplit(b)
    return (_host(first.hostname), first.port or 6379) == (_host(second.hostname), second.port or 6379)


def choose(environ: MutableMapping[str, str], *, on_product_stores: bool) -> Stores:
    """The stores the run uses; SystemExit when they would be the product's without `on_product_stores`."""
    database, redis = product_stores(environ)
    if on_product_stores:
        return Stores(database, redis, own_redis=False)
    own_database = environ.get("LOADTEST_DATABASE_URL") or (
        f"sqlite:///{data_dir(environ) / 'loadtest' / 'db.sqlite3'}"
    )
    own_redis = environ.get("LOADTEST_REDIS_URL", "")
    if same_database(own_database, database):
        raise SystemExit(f"LOADTEST_DATABASE_URL is the product's database; {FLAG} to load it on purpose")
    if own_redis and same_redis(own_redis, redis):
        raise SystemExit(f"LOADTEST_REDIS_URL is the product's Redis; {FLAG} to load it on purpose")
    if not own_redis:
        return Stores(own_database, f"redis://:{secrets.token_urlsafe(16)}@127.0.0.1:{free_port()}/0", True)
    return Stores(own_database, own_redis, own_redis=False)


def configure(environ: MutableMapping[str, str], stores: Stores) -> None:
    """Point the settings (this process's and those it starts) at `stores`."""
    for name in ("DATABASE_URL_FILE", "REDIS_URL_FILE"):
        environ.pop(name, None)
    environ["DATABASE_URL"] = stores.database_url
    environ["REDIS_URL"] = stores.redis_url
    if stores.database_url.startswith("sqlite:"):
        Path(dj_database_url.parse(stores.database_url)["NAME"]).parent.mkdir(parents=True, exist_ok=True)
