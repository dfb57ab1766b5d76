"""The embedding server with its linear layers in int8 (EMBEDDING_QUANTIZE, `--quantize`) against the
float model's, each started through the launcher as `runembeddings` starts it: the quantized server's
vectors are its own, close to the float model's, and rank texts as they do. A text's vector moves a
little with the texts beside it in a pass (each pass's activations get one int8 scale); the float
model's does not."""

import pytest
from django.conf import settings

from tests.engine.embedding_servers import cosine, embedding_server, vectors

TEXTS = [
    "Claims under the equipment warranty must reach the Oslo service desk within 45 days of delivery.",
    "How long do I have to file an equipment warranty claim?",
    "The finance office approves travel requests before the end of each month.",
    "About 4,931 people live in Torka, most of them along the river.",
    "What is the population of Torka?",
    "The recipe needs two cups of flour and an egg.",
    "Reciprocal rank fusion adds one over the rank plus a constant for each ranking a passage is in, "
    "so a passage that both the vector search and the full-text search find near the top wins. " * 3,
]


@pytest.fixture(scope="module")
def urls(embedding_url, float_embedding_url):
    """(the float model's server, the quantized one's)."""
    if settings.EMBEDDING_QUANTIZE:
        yield float_embedding_url, embedding_url
        return
    with embedding_server("embeddings-int8", runner="transformers", quantize=True) as url:
        yield float_embedding_url, url


def test_its_vectors_are_the_quantized_models_close_to_the_float_models(urls):
    float_url, int8_url = urls
    exact, quantized = vectors(float_url, TEXTS), vectors(int8_url, TEXTS)
    similarity = [cosine(a, b) for a, b in zip(exact, quantized, strict=True)]
    # Not the float model's own vectors: the int8 layers ran.
    assert max(similarity) < 0.9999
    assert min(similarity) > 0.95 and sum(similarity) / len(similarity) > 0.97
    assert vectors(int8_url, TEXTS) == quantized


def test_it_ranks_answers_as_the_float_model_does(urls):
    for url in urls:
        fact, question, _, population, population_question, recipe, _ = vectors(url, TEXTS)
        assert cosine(question, fact) > cosine(question, population) + 0.4
        assert cosine(population_question, population) > cosine(population_question, recipe) + 0.4


def test_a_texts_vector_moves_a_little_with_its_neighbours_in_a_pass_and_only_quantized(urls):
    text = TEXTS[1]
    for url, closest in zip(urls, (0.99999, 0.95), strict=True):
        alone = vectors(url, [text])[0]
        # Neighbours of about its length: a pass runs texts of one length together (length_groups).
        among = vectors(url, [TEXTS[0], text, TEXTS[2]])[1]
        assert cosine(alone, among) > closest
    assert cosine(alone, among) < 0.9999
