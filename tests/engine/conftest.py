import pytest
from django.conf import settings

from tests.engine.embedding_servers import embedding_server


@pytest.fixture(scope="session")
def embedding_url():
    """The product's transformers embedding server, with the settings' limits, for the session."""
    with embedding_server("embeddings", runner="transformers") as url:
        yield url


@pytest.fixture(scope="session")
def float_embedding_url(request):
    """The transformers server with the float model (EMBEDDING_QUANTIZE=false): the session's own
    where the settings say so, else one of its own."""
    if not settings.EMBEDDING_QUANTIZE:
        yield request.getfixturevalue("embedding_url")
        return
    with embedding_server("embeddings-float", runner="transformers", quantize=False) as url:
        yield url
