import pytest

from tests.engine.embedding_servers import embedding_server


@pytest.fixture(scope="session")
def embedding_url():
    """The product's transformers embedding server, with the settings' limits, for the session."""
    with embedding_server("embeddings", runner="transformers") as url:
        yield url
