"""Full-text search ranks a bounded set of passages: those holding the question's rarest words, on SQLite
(FTS5's vocabulary) and on PostgreSQL (ANALYZE's statistics)."""

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings

from knowledge import fulltext, services
from knowledge.fulltext import Statistics, candidates
from knowledge.models import Chunk, Document

pytestmark = pytest.mark.django_db

COMMON = Statistics(rows=10_000, shares={"report": 0.4, "budget": 0.3, "annual": 0.05, "zeppelin": 0.0001})


def test_it_ors_the_rarest_words_while_the_passages_expected_stay_within_the_bound():
    assert candidates(["report", "budget", "annual", "zeppelin"], COMMON, 600) == (
        ["zeppelin", "annual"],
        False,
    )
    assert candidates(["report", "budget", "annual", "zeppelin"], COMMON, 100) == (["zeppelin"], False)


def test_it_ands_the_rarest_words_where_even_the_rarest_is_too_common():
    assert candidates(["report", "budget", "annual"], COMMON, 200) == (["annual", "budget"], True)
    assert candidates(["report", "budget"], COMMON, 10) == (["budget", "report"], True)


def test_without_statistics_every_word_is_a_candidate():
    assert candidates(["report", "budget"], Statistics(), 1) == (["budget", "report"], False)


@pytest.fixture
def reports():
    """300 passages holding the common words, one holding a rare word too, one holding the common words
    most often (the best by them, stored late), and the statistics the database keeps (autovacuum's
    ANALYZE on PostgreSQL; FTS5's vocabulary is always current)."""
    owner = get_user_model().objects.create_user("owner", password="pw-owner-123")
    collection = services.collection_create(owner=owner, name="Reports")
    document = Document.objects.create(
        collection=collection, name="reports.txt", content_hash="0" * 64, status=Document.Status.READY
    )
    texts = [f"The annual budget report lists the costs of department {i}." for i in range(300)]
    texts.insert(137, "The annual budget report of the zeppelin hangar lists its helium costs.")
    texts.insert(250, "Annual budget report: the annual budget report repeats the annual budget report.")
    Chunk.objects.bulk_create(
        Chunk(document=document, collection=collection, position=i, text=text, chunker="test", embedding=b"")
        for i, text in enumerate(texts)
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE knowledge_chunk")
    return collection


@override_settings(KNOWLEDGE_FTS_RANKED=50)
def test_a_rare_word_finds_its_passage_among_many_holding_the_common_words(reports):
    found = fulltext.search("zeppelin budget report", [reports.pk], 200)
    assert [Chunk.objects.get(pk=pk).position for pk, _ in found] == [137]


def test_common_words_alone_rank_at_most_the_bound(reports):
    def best(limit: int) -> list[int]:
        return [
            Chunk.objects.get(pk=pk).position
            for pk, _ in fulltext.search("annual budget", [reports.pk], limit)
        ]

    assert best(10)[0] == 250
    with override_settings(KNOWLEDGE_FTS_RANKED=50):
        # The passages ranked are 50 of those holding both words, not all 302: the best is stored later.
        found = best(10)
        assert len(found) == 10 and 250 not in found


def test_under_the_bound_every_passage_holding_a_word_is_ranked(reports):
    found = fulltext.search("zeppelin budget report", [reports.pk], 400)
    assert len(found) == 302
    assert Chunk.objects.get(pk=found[0][0]).position == 137
