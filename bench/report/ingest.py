"""Section 11's ingestion at scale (bench.bench_knowledge_ingest) and the chat beside an ingestion
(bench.bench_knowledge_chat): their tables and one chart of both."""

from pathlib import Path

import matplotlib.pyplot as plt

from bench.report.blocks import PRODUCT, RAW, fmt, load, table, verdict

TARGET_MS = 50


def parts(folder: Path) -> list[str]:
    """The subsections of whichever of the two results are saved, and their chart."""
    ingest, chat = load(folder, "knowledge_ingest"), load(folder, "knowledge_chat")
    if not ingest and not chat:
        return []
    chart = folder / "knowledge-ingestion.png"
    _chart(ingest, chat, chart)
    image = f"![Ingestion under kills, and the chat beside it]({chart.relative_to(folder.parent).as_posix()})"
    return [*_ingest(ingest), *_chat(chat), image]


def _ingest(result: dict | None) -> list[str]:
    if not result:
        return []
    kill = result.get("kill")
    killed = (
        f"the worker and its Redis SIGKILLed at {kill['at_s']} s ({kill['ready']:,} documents ready), "
        f"Redis's data deleted, both started again in {kill['restart_s']} s"
        if kill
        else "nothing killed"
    )
    met = result["lost"] == 0 and result["embedded_again"] <= result["embedded_again_allowed"]
    return [
        f"### {result['documents']:,} documents ingested, the worker and Redis killed midway",
        f"{result['documents']:,} documents of about 500 tokens of real prose "
        f"({result['document_tokens']:,} tokens) uploaded as zips of 1,000 into one collection and indexed "
        f"by a real Celery worker with beat and the embedding engine, {killed} (bench/knowledge_ingest.py; "
        f"store: {result['store']}).",
        table(
            [
                "documents",
                "passages",
                "windows",
                "wall s",
                "documents/s",
                "tokens/s",
                "tokens/s per core",
                "texts embedded",
                "distinct texts",
                "embedded again",
                "lost",
            ],
            [
                [
                    f"{result['documents']:,}",
                    f"{result['passages']:,}",
                    f"{result['windows']:,}",
                    fmt(result["wall_s"]),
                    fmt(result["documents_per_s"], 2),
                    fmt(result["tokens_per_s"]),
                    fmt(result["tokens_per_s_per_core"]),
                    f"{result['texts_embedded']:,}",
                    f"{result['distinct_texts']:,}",
                    f"{result['embedded_again']:,}",
                    f"{result['lost']:,}",
                ]
            ],
        ),  # fmt: skip
        f"Targets: no document lost and none embedded twice (at most the batch in flight, "
        f"{result['embedded_again_allowed']:,} texts, embedded again) — {verdict(met)}.",
    ]


def _chat(result: dict | None) -> list[str]:
    if not result:
        return []
    rows = []
    for run in result["rounds"]:
        for phase in run["phases"]:
            rows.append(
                [f"{run['embedding_nice']}, {run['embed_batch_while_chat']}", phase["phase"],
                 fmt(phase["gap_p50_ms"]), fmt(phase["gap_p99_ms"]), fmt(phase["ttft_p50_ms"]),
                 fmt(phase["ttft_p95_ms"]), fmt(phase["question_ttft_p50_ms"]),
                 fmt(phase["question_ttft_p95_ms"]), fmt(phase["load_mean"], 2)]
            )  # fmt: skip
    verdicts = "; ".join(
        f"niceness {run['embedding_nice']}, {run['embed_batch_while_chat']} texts a request while chat "
        f"streams: {run['gap_p99_added_ms']:+.1f} ms, {verdict(run['target_met'])}"
        for run in result["rounds"]
    )
    return [
        "### The chat while ingestion runs",
        f"{result['users']} chat users at once over the WebSocket, {result['answers']} answers each a phase "
        f"of {result['tokens']} tokens each; then {result['rounds'][0]['phases'][0]['questions']} questions "
        f"of a collection one at a time; without ingestion, with {result['documents']} documents being "
        "indexed, and without again (bench/bench_knowledge_chat.py). Times in ms at the client; a round's "
        "embedding engine niceness and its texts a request while chat streams (`EMBEDDING_NICE`, "
        "`KNOWLEDGE_EMBED_BATCH_WHILE_CHAT`).",
        table(
            [
                "nice, texts while chat",
                "phase",
                "gap p50",
                "gap p99",
                "TTFT p50",
                "TTFT p95",
                "question TTFT p50",
                "question TTFT p95",
                "load",
            ],
            rows,
        ),  # fmt: skip
        f"Target: the between-token p99 with ingestion within {TARGET_MS} ms of without (both phases "
        f"without pooled) — {verdicts}.",
    ]


def _chart(ingest: dict | None, chat: dict | None, path: Path) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    if ingest:
        seconds = [row[0] for row in ingest["timeline"]]
        left.plot(seconds, [row[1] for row in ingest["timeline"]], color=PRODUCT, label="documents ready")
        if ingest.get("kill"):
            left.axvline(ingest["kill"]["at_s"], color="#dc2626", linestyle="--", linewidth=1, label="killed")
        left.set_xlabel("seconds from the first upload")
        left.set_ylabel("documents ready")
        left.legend(fontsize=7)
        left.grid(alpha=0.3)
    if chat:
        labels, p50, p99 = [], [], []
        for run in chat["rounds"]:
            for phase in run["phases"]:
                labels.append(f"{run['embedding_nice']},{run['embed_batch_while_chat']}\n{phase['phase']}")
                p50.append(phase["gap_p50_ms"])
                p99.append(phase["gap_p99_ms"])
        x = range(len(labels))
        right.bar([i - 0.2 for i in x], p50, width=0.4, color=RAW, label="between tokens p50")
        right.bar([i + 0.2 for i in x], p99, width=0.4, color=PRODUCT, label="p99")
        right.set_xticks(list(x), labels, fontsize=6)
        right.set_ylabel("ms")
        right.legend(fontsize=7)
        right.grid(alpha=0.3, axis="y")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
