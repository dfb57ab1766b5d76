"""Memory of the exact vector search's matrix (knowledge.vectors) for the planted-fact set.

    python -m bench.knowledge_matrix --documents 10000

The set's documents are cut by the product's chunker into passages and windows and stored with random unit
vectors (memory does not depend on the values) in an SQLite database of this run's own; the matrix is
then read once as a search reads it, and the bytes it holds, the most Python held while reading it, the
process's peak RSS growth and the exact search's median time are printed.
"""

import argparse
import json
import os
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path


def build(documents: int) -> int:
    """The set's chunks and windows with random vectors; the collection's id."""
    import numpy as np
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from bench import knowledge_facts
    from bench.knowledge_corpus import passages
    from knowledge import chunking, services
    from knowledge.models import Chunk, Document, Window

    call_command("migrate", verbosity=0)
    facts = knowledge_facts.facts(40)
    docs = knowledge_facts.documents(passages(documents + 2 * len(facts)), facts, documents)
    owner, _ = get_user_model().objects.get_or_create(username="bench-matrix")
    collection = services.collection_create(owner=owner, name="Facts")
    rng = np.random.default_rng(0)

    def unit() -> bytes:
        vector = rng.standard_normal(384).astype("<f4")
        return (vector / np.linalg.norm(vector)).tobytes()

    chunks, windows = [], []
    for i, (text, _) in enumerate(docs):
        document = Document.objects.create(
            collection=collection, name=f"doc-{i}.txt", content_hash=f"{i:064d}", text=text, status="ready"
        )
        for piece in chunking.pieces(text):
            chunk = Chunk(document=document, collection=collection, position=piece.position, text=piece.text,
                          tokens=piece.tokens, chunker=chunking.chunker_id(), embedding=unit())  # fmt: skip
            chunks.append(chunk)
            windows.append(len(chunking.windows(piece.text)))
    Chunk.objects.bulk_create(chunks, batch_size=500)
    Window.objects.bulk_create(
        [Window(chunk_id=chunk.pk, collection=collection, position=k, embedding=unit())
         for chunk, n in zip(chunks, windows, strict=True) for k in range(n)],
        batch_size=1000,
    )  # fmt: skip
    return collection.pk


def measure(collection_id: int) -> dict:
    from knowledge import vectors

    vectors._version(collection_id)  # the connection opened before anything is counted
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    began = time.perf_counter()
    matrix = vectors._matrix(collection_id)
    read_s = time.perf_counter() - began
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    times = []
    for i in range(30):
        began = time.perf_counter()
        vectors.exact(matrix.vectors[i], [collection_id], 200)
        times.append((time.perf_counter() - began) * 1000)
    return {
        "passages": len(matrix.ids),
        "rows": int(matrix.vectors.shape[0]),
        "matrix_mb": round(matrix.vectors.nbytes / 1e6, 1),
        "held_mb": round(held / 1e6, 1),
        "peak_while_reading_mb": round(peak / 1e6, 1),
        "peak_rss_growth_mb": round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 1e3, 1),
        "read_s": round(read_s, 2),
        "exact_p50_ms": round(sorted(times)[len(times) // 2], 1),
    }


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(folder) / 'matrix.sqlite3'}"
        from bench import setup

        setup()
        result = {"documents": options.documents, **measure(build(options.documents))}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
