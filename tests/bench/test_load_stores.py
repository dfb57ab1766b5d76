"""The load test runs on its own database and Redis (bench.load.stores): the product's are refused
unless asked for in so many words, and the image the product ships has no benchmarks in it."""

import subprocess
import sys
from pathlib import Path

import pytest

from bench.load import stores
from harness.processes import ROOT


def test_by_default_it_makes_its_own_database_and_redis_beside_make_runs(tmp_path):
    chosen = stores.choose({"DATA_DIR": str(tmp_path)}, on_product_stores=False)
    assert chosen.database_url == f"sqlite:///{tmp_path / 'loadtest' / 'db.sqlite3'}"
    assert chosen.own_redis and not stores.same_redis(chosen.redis_url, stores.PRODUCT_REDIS)
    # A password of its own, as every bundled Redis has.
    assert chosen.redis_url.startswith("redis://:") and "@127.0.0.1:" in chosen.redis_url


def test_it_uses_the_stores_it_is_given_for_the_load_test(tmp_path):
    environ = {
        "DATA_DIR": str(tmp_path),
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/chatsite",
        "REDIS_URL": "redis://127.0.0.1:6379/0",
        "LOADTEST_DATABASE_URL": "postgres://postgres@127.0.0.1:5432/chatsite_load",
        "LOADTEST_REDIS_URL": "redis://127.0.0.1:6390/0",
    }
    chosen = stores.choose(environ, on_product_stores=False)
    assert (chosen.database_url, chosen.redis_url, chosen.own_redis) == (
        "postgres://postgres@127.0.0.1:5432/chatsite_load",
        "redis://127.0.0.1:6390/0",
        False,
    )


@pytest.mark.parametrize(
    "given",
    [
        # The product's database, spelled otherwise.
        {
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/chatsite",
            "LOADTEST_DATABASE_URL": "postgres://other@127.0.0.1/chatsite",
        },
        # make run's SQLite.
        {"LOADTEST_DATABASE_URL": "sqlite:///{data}/db.sqlite3"},
        # The product's Redis, another database number: its pub/sub channels are the same server's.
        {"REDIS_URL": "redis://127.0.0.1:6379/0", "LOADTEST_REDIS_URL": "redis://localhost:6379/5"},
        # make run's bundled Redis.
        {"LOADTEST_REDIS_URL": "redis://:pw@127.0.0.1:6380/1"},
    ],
)
def test_the_products_own_stores_are_refused_unless_asked_for(tmp_path, given):
    environ = {"DATA_DIR": str(tmp_path), **{k: v.format(data=tmp_path) for k, v in given.items()}}
    with pytest.raises(SystemExit, match=stores.FLAG):
        stores.choose(environ, on_product_stores=False)
    chosen = stores.choose(environ, on_product_stores=True)
    assert not chosen.own_redis


def test_the_product_stores_follow_the_settings_secret_files(tmp_path):
    (tmp_path / "url").write_text("redis://:pw@127.0.0.1:6391/0\n")
    environ = {
        "DATA_DIR": str(tmp_path),
        "REDIS_URL_FILE": str(tmp_path / "url"),
        "LOADTEST_REDIS_URL": "redis://127.0.0.1:6391/2",
    }
    with pytest.raises(SystemExit):
        stores.choose(environ, on_product_stores=False)


def test_configure_points_the_settings_at_the_chosen_stores(tmp_path):
    environ = {"DATABASE_URL_FILE": "/run/secrets/db", "REDIS_URL": "redis://127.0.0.1:6379/0"}
    chosen = stores.Stores(f"sqlite:///{tmp_path / 'load' / 'db.sqlite3'}", "redis://127.0.0.1:6392/0", True)
    stores.configure(environ, chosen)
    assert environ == {"DATABASE_URL": chosen.database_url, "REDIS_URL": "redis://127.0.0.1:6392/0"}
    assert (tmp_path / "load").is_dir()


def test_the_production_image_has_no_benchmarks_and_the_product_needs_none():
    ignored = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text().split()
    assert "bench" in ignored
    product = [
        p for p in ROOT.glob("*/") if (p / "__init__.py").exists() and p.name not in ("bench", "tests")
    ]
    found = subprocess.run(
        ["grep", "-rlE", r"^\s*(from|import) bench\b", *map(str, product)], capture_output=True, text=True
    )
    assert found.stdout == "", "a product module imports the benchmarks"


def test_the_load_test_refuses_the_products_redis_before_starting_anything(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bench.load.run", "--users", "1"],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "DATA_DIR": str(tmp_path),
            "LOADTEST_REDIS_URL": "redis://127.0.0.1:6380/0",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and stores.FLAG in result.stderr
    assert not Path(tmp_path / "loadtest").exists()
