"""Hybrid retrieval: vectors and words fused; a paraphrase found by meaning, a rare word by the text
index; only the collections asked for, which the caller has checked the user may read."""

import asyncio

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inference.engine import embedding_client
from knowledge import chunking, indexing, search, services
from knowledge.models import Chunk

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("embedding_engine")]

FACTS = {
    "parking.txt": "Staff may park in the north garage; visitors use the south lot after nine.",
    "leave.txt": "Employees accrue twenty-five days of paid vacation per calendar year.",
    "expenses.txt": "Receipts for travel costs must be submitted within thirty days of the trip.",
    "security.txt": "Badges must be worn visibly at all times inside the building.",
    "kitchen.txt": "The espresso machine on floor three is descaled every Friday by facilities.",
}


def ask(question: str, collections: list[int], mode: str = "hybrid", top_k: int = 3):
    vector = embedding_client().embed([question], priority="query")[0]
    return search.passages(
        question=question, query_vector=vector, collection_ids=collections, top_k=top_k, mode=mode
    )


@pytest.fixture
def handbook():
    owner = get_user_model().objects.create_user("owner", password="pw-owner-123")
    collection = services.collection_create(owner=owner, name="Handbook")
    services.documents_add(
        collection=collection, uploads=[SimpleUploadedFile(n, t.encode()) for n, t in FACTS.items()]
    )
    asyncio.run(indexing.index_collection(collection_id=collection.pk, worker="test/1", seconds=60))
    return collection


def test_a_paraphrase_finds_the_fact_by_meaning(handbook):
    found = ask("How much holiday time do workers get each year?", [handbook.pk], mode="vector")
    assert found[0].document == "leave.txt"
    assert found[0].similarity > 0.3
    hybrid = ask("How much holiday time do workers get each year?", [handbook.pk])
    assert hybrid[0].document == "leave.txt"


def test_a_rare_word_finds_the_fact_by_text(handbook):
    found = ask("descaled", [handbook.pk], mode="text")
    assert [p.document for p in found] == ["kitchen.txt"]
    assert found[0].similarity is None
    assert ask("When is the espresso machine descaled?", [handbook.pk])[0].document == "kitchen.txt"


def test_passages_name_their_document_and_carry_their_text(handbook):
    best = ask("Where can visitors park?", [handbook.pk])[0]
    assert best.document == "parking.txt" and "south lot" in best.text
    assert best.as_dict()["document_name"] == "parking.txt"


def test_it_searches_only_the_collections_it_is_given(handbook):
    other_owner = get_user_model().objects.create_user("other", password="pw-other-1234")
    other = services.collection_create(owner=other_owner, name="Other")
    services.documents_add(
        collection=other,
        uploads=[SimpleUploadedFile("secret.txt", b"The vault code is kept by the espresso team.")],
    )
    asyncio.run(indexing.index_collection(collection_id=other.pk, worker="test/2", seconds=60))
    found = ask("espresso vault code", [handbook.pk], top_k=10)
    assert found and {p.collection_id for p in found} == {handbook.pk}
    assert "secret.txt" in {p.document for p in ask("espresso vault code", [other.pk])}
    assert ask("espresso", []) == []


BURIED = (
    "The cafeteria menu changes every Monday and lists a soup, two salads and one hot dish. "
    "Printer toner is ordered by the office manager when the warning light turns amber. "
    "The fire drill takes place on the first Tuesday of each quarter at ten in the morning. "
    "Guests find the wireless network password on the card at the reception desk. "
    "Bicycle racks stand behind the east entrance and are cleared of abandoned bikes each spring."
)
DRILL = "When is the fire drill held?"


def test_a_passage_that_one_sentence_answers_ranks_by_that_sentence():
    owner = get_user_model().objects.create_user("owner", password="pw-owner-123")
    collection = services.collection_create(owner=owner, name="Office")
    services.documents_add(collection=collection, uploads=[SimpleUploadedFile("office.txt", BURIED.encode())])
    asyncio.run(indexing.index_collection(collection_id=collection.pk, worker="test/1", seconds=60))
    chunk = Chunk.objects.get(collection=collection)
    assert chunk.windows.count() == 5
    drill = chunking.windows(chunk.text)[2]
    assert drill.startswith("The fire drill")
    question, passage, sentence = (
        np.asarray(v) for v in embedding_client().embed([DRILL, chunk.text, drill])
    )
    found = ask(DRILL, [collection.pk], mode="vector")
    assert [p.chunk_id for p in found] == [chunk.pk]
    # Scored by its best window, the fire drill's sentence, above the passage's own vector.
    assert found[0].similarity == pytest.approx(float(question @ sentence), abs=2e-3)
    assert found[0].similarity > float(question @ passage) + 0.1


def test_fusion_sums_reciprocal_ranks_across_rankings():
    assert search.fuse([[1, 2], [2, 3]], 60)[2] == pytest.approx(1 / 62 + 1 / 61)


HOLIDAY = "How much holiday time do workers get each year?"


def test_the_score_floor_drops_what_only_the_vector_search_found_far_from_the_question(handbook, settings):
    settings.KNOWLEDGE_MIN_SCORE = 0.0
    found = ask(HOLIDAY, [handbook.pk], mode="vector", top_k=5)
    assert len(found) == 5 and found[0].document == "leave.txt"
    settings.KNOWLEDGE_MIN_SCORE = (found[0].similarity + found[1].similarity) / 2
    assert [p.document for p in ask(HOLIDAY, [handbook.pk], mode="vector", top_k=5)] == ["leave.txt"]
    # A passage the words found stays, however far its vector.
    assert [p.document for p in ask("descaled", [handbook.pk], top_k=5)] == ["kitchen.txt"]


def test_a_search_reads_its_passages_in_one_query_however_many(handbook, settings):
    settings.KNOWLEDGE_MIN_SCORE = 0.0
    vector = embedding_client().embed([HOLIDAY], priority="query")[0]

    def searched(top_k: int) -> tuple[int, int]:
        with CaptureQueriesContext(connection) as captured:
            found = search.passages(
                question=HOLIDAY, query_vector=vector, collection_ids=[handbook.pk], top_k=top_k
            )
        return len(found), len(captured)

    searched(5)  # the collection's vectors read once
    (one, queries_one), (five, queries_five) = searched(1), searched(5)
    assert (one, five) == (1, 5)
    assert queries_one == queries_five
