"""Section 10: embedding a knowledge collection, three ways."""

from pathlib import Path

from bench.report.blocks import fmt, table

TARGET = 0.8


def section(result: dict, folder: Path) -> str:
    def row(name: str, run: dict) -> list[str]:
        return [name, fmt(run["tokens_per_s"]), fmt(run["tokens_per_s_per_core"]), fmt(run["texts_per_s"])]

    alone, pooling, product = result["in_process"], result["vllm"], result["product"]
    batches = ", ".join(
        f"{batch}: {fmt(run['tokens_per_s'])}" for batch, run in result["in_process_by_batch"].items()
    )
    share = result["product_share"]
    return "\n\n".join(
        [
            "## 10. Knowledge: embedding",
            f"{alone['texts']} texts of about {alone['tokens'] // alone['texts']} tokens embedded by "
            f"{result['model']} on {result['cores']} cores: (a) transformers in a process alone (no "
            f"HTTP), {result['max_batch']} texts a forward pass; (b) vLLM's pooling runner "
            f"alone (`EMBEDDING_RUNNER=vllm`); (c) the product's embedding server over HTTP as "
            f"ingestion sends to it ({result['workers']} workers, {result['batch']} texts a request, "
            "through `inference.embeddings`), with a question's embedding every 0.2 s beside it.",
            table(
                ["path", "tokens/s", "tokens/s per core", "texts/s"],
                [
                    row("(a) transformers in-process alone", alone),
                    row("(b) vLLM pooling runner alone", pooling),
                    row("(c) the product's server, as ingestion sends", product),
                ],
            ),
            f"(c) is {share:.2f}x the faster of (a) and (b), per core (target {TARGET}x): "
            + ("met." if share >= TARGET else "missed.")
            + f" A question's embedding took {fmt(product.get('query_ms_p50'))} ms at p50 "
            f"(at most {fmt(product.get('query_ms_max'))} ms) beside ingestion, against "
            f"{fmt(product.get('query_ms_idle_p50'))} ms idle. In-process tokens/s by texts a "
            f"forward pass: {batches}.",
        ]
    )
