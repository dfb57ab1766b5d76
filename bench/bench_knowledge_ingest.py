"""Knowledge ingestion at scale: 10,000 documents of about 500 tokens into one collection, the worker and
its Redis SIGKILLed midway (bench.knowledge_ingest).

Reports documents, passages and tokens, the wall time from the first upload to the last document ready,
documents/s and tokens/s (and per core), the texts the embedding engine embedded against the distinct
texts stored, and the documents lost. Targets: zero documents lost, and nothing embedded twice beyond the
batch in flight at the kill. `--no-kill`: the same run without the kill, for its throughput. `--paths N`:
then benchmark 10's two embedding paths alone on N of the texts the run embedded, and the ingestion's
embedded tokens (reading, chunking, embedding, writing) against the faster of them (target 0.8x), a second
of wall time and a CPU second of the processes each path runs (the engine, the worker, Redis; the model's
process; vLLM's server and its clients): a run without the kill counts its CPU.
Run: `python -m bench.bench_knowledge_ingest [--documents N] [--store sqlite|postgres|pgvector] [--no-kill]
[--paths N]`.
"""

import json

from bench import setup
from bench.knowledge_ingest import embedding_paths, environment, run_ingest
from bench.results import arguments, save


def parser():
    def extra(parser) -> None:
        parser.add_argument("--documents", type=int, default=10_000)
        parser.add_argument(
            "--store", choices=["sqlite", "postgres", "pgvector"], default="sqlite",
            help="the database: a fresh SQLite file under var/bench (default), PostgreSQL "
            "(BENCH_DATABASE_URL or the local server's bench_knowledge), or the bundled pgvector server",
        )  # fmt: skip
        parser.add_argument("--no-kill", action="store_true", help="no worker or Redis killed")
        parser.add_argument(
            "--paths", type=int, default=0, metavar="TEXTS",
            help="after the run, the two embedding paths alone on this many of its texts, and the "
            "ingestion's embedded tokens/s against the faster (target 0.8x)",
        )  # fmt: skip

    return arguments(__doc__.splitlines()[0], extra)


def path_shares(result: dict, paths: dict) -> dict:
    """The ingestion's embedded tokens against the faster path's, a second of wall time and a CPU second."""
    shares = {}
    for rate, name in (("tokens_per_s", "wall"), ("tokens_per_cpu_s", "cpu")):
        faster = max(paths["in_process"][rate], paths["vllm"][rate])
        shares[name] = round(result[f"embedded_{rate}"] / faster, 2)
    return {"ingestion_share_of_faster_path": shares}


def main() -> dict:
    options = parser().parse_args()
    count = 200 if options.quick else options.documents
    server = environment(options.store)
    try:
        setup()

        result = {
            "benchmark": "knowledge_ingest",
            "store": options.store,
            **run_ingest(count, kill=not options.no_kill),
        }
        if options.paths:
            from knowledge.models import Collection

            collection = Collection.objects.get(pk=result["collection"])
            result["paths"] = paths = embedding_paths(collection, options.paths)
            result.update(path_shares(result, paths))
    finally:
        if server is not None:
            server.cleanup()
    print(json.dumps({k: v for k, v in result.items() if k != "timeline"}, indent=2))
    name = "knowledge_ingest" + ("_no_kill" if options.no_kill else "")
    save(options.output, name, result)
    return result


if __name__ == "__main__":
    main()
