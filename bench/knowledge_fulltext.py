"""Full-text search alone at a size (`python -m bench.knowledge_fulltext --store postgres --passages 100000`):
the product's `knowledge.fulltext.search` against ranking every passage that holds a word of the question
(the query before the bound), on the benchmark's questions and on passages' own words (docs/benchmarks.md,
section 11). Text only: the passages get no vectors, so nothing is embedded."""

import argparse
import json
import os
import random
import time

import numpy as np

from bench import setup
from bench.bench_knowledge import QUESTIONS, _fill, _fresh_database, _store_url
from bench.results import ROOT, percentile

OWN_WORDS = 150


def _unbounded(question: str, collection_id: int, limit: int) -> list[tuple[int, float]]:
    """Every passage holding a word of the question, ranked."""
    from django.conf import settings
    from django.db import connection

    from knowledge.fulltext import words

    terms = words(question)
    if not terms:
        return []
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute(
                "SELECT c.id, -bm25(knowledge_chunk_fts) FROM knowledge_chunk_fts "
                "JOIN knowledge_chunk c ON c.id = knowledge_chunk_fts.rowid "
                "WHERE knowledge_chunk_fts MATCH %s AND c.collection_id = %s "
                "ORDER BY bm25(knowledge_chunk_fts) LIMIT %s",
                [" OR ".join(f'"{term}"' for term in terms), collection_id, limit],
            )
        else:
            cursor.execute(
                "WITH q AS (SELECT to_tsquery(%s::regconfig, "
                "array_to_string(array(SELECT quote_literal(w) FROM unnest(%s::text[]) w), ' | ')) AS q) "
                "SELECT c.id, ts_rank(c.search, q.q) AS rank FROM knowledge_chunk c, q "
                "WHERE c.search @@ q.q AND c.collection_id = %s ORDER BY rank DESC, c.id LIMIT %s",
                [settings.KNOWLEDGE_FTS_CONFIG, terms, collection_id, limit],
            )
        return cursor.fetchall()


def run(size: int) -> dict:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from bench.knowledge_corpus import passages
    from knowledge import fulltext, services

    call_command("migrate", verbosity=0)
    texts = passages(size + QUESTIONS)
    questions = [" ".join(t.split()[:12]) for t in texts[size:]]
    owner, _ = get_user_model().objects.get_or_create(username="bench-fulltext")
    collection = services.collection_create(owner=owner, name="Corpus")
    _fill(collection, texts[:size], np.zeros((size, settings.EMBEDDING_DIMENSIONS), dtype="<f4"), 0)
    first = collection_first_id(collection)
    chosen = random.Random(1).sample(range(size), OWN_WORDS)
    own = []
    for i in chosen:
        found = texts[i].split()
        start = random.Random(i).randrange(0, max(1, len(found) - 8))
        own.append((first + i, " ".join(found[start : start + 8])))
    limit = settings.KNOWLEDGE_CANDIDATES
    searches = {
        "unbounded": lambda q: _unbounded(q, collection.pk, limit),
        "bounded": lambda q: fulltext.search(q, [collection.pk], limit),
    }
    result, previous = {"passages": size, "load_before": os.getloadavg()}, None
    for name, search in searches.items():
        for question in questions[:20]:
            search(question)
        times, rankings = [], []
        for question in questions:
            began = time.perf_counter()
            rankings.append([row[0] for row in search(question)])
            times.append((time.perf_counter() - began) * 1000)
        previous = previous or rankings
        ranks = []
        for chunk_id, question in own:
            found = [row[0] for row in search(question)]
            ranks.append(found.index(chunk_id) + 1 if chunk_id in found else len(found) + 1)
        ranks = np.array(ranks)
        result[name] = {
            "p50_ms": round(percentile(times, 50), 1),
            "p99_ms": round(percentile(times, 99), 1),
            "same_top10": round(
                float(
                    np.mean(
                        [
                            len(set(a[:10]) & set(b[:10])) / max(1, len(b[:10]))
                            for a, b in zip(rankings, previous, strict=True)
                        ]
                    )
                ),
                3,
            ),
            "own_words_first": round(float((ranks <= 1).mean()), 3),
            "own_words_top10": round(float((ranks <= 10).mean()), 3),
            "own_words_top200": round(float((ranks <= 200).mean()), 3),
        }
        print(name, result[name], flush=True)
    result["load_after"] = os.getloadavg()
    return result


def collection_first_id(collection) -> int:
    from knowledge.models import Chunk

    return Chunk.objects.filter(collection=collection).order_by("id").values_list("id", flat=True)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--passages", type=int, default=100_000)
    options = parser.parse_args()
    url, _ = _store_url(options.store, ROOT / "var" / "bench" / f"knowledge-fulltext-{options.store}")
    _fresh_database(url)
    os.environ["DATABASE_URL"] = url
    setup()
    print(json.dumps({"store": options.store, **run(options.passages)}))


if __name__ == "__main__":
    main()
