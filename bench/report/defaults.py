"""Section 8: the product against vLLM started with its default flags."""

from pathlib import Path

from bench.bench_defaults import SIDES
from bench.report.blocks import fmt, table, verdict


def section(result: dict, folder: Path) -> str:
    def chat_cell(figures: dict) -> str:
        return f"{fmt(figures['tokens_per_s'])} tokens/s (TTFT p50 {fmt(figures['ttft_p50_ms'], 0)} ms)"

    def bulk_cell(figures: dict) -> str:
        return f"{fmt(figures['docs_per_minute'])} documents/min"

    def runs(figures: dict) -> str:
        return " / ".join(fmt(run) for run in figures.get("runs", []))

    rows = []
    for workload, cell, key, label in (
        ("chat", chat_cell, "tokens_per_s", f"chat, {result['chats']} at once"),
        ("bulk", bulk_cell, "docs_per_minute", f"bulk, {result['bulk_product']['documents']} documents"),
    ):
        raw, engine, product = (result[f"{workload}_{side}"] for side in SIDES)
        rows.append(
            [
                label,
                cell(raw),
                cell(engine),
                cell(product),
                f"{engine[key] / raw[key]:.2f}×",
                f"{result[f'{workload}_ratio']:.2f}×",
                f"{runs(raw)}; {runs(engine)}; {runs(product)}",
            ]
        )
    eager = result["engines"].get("product", {}).get("enforce_eager")
    engine_mode = "" if eager is None else (" (eager)" if eager else " (compiled)")
    return "\n\n".join(
        [
            "## 8. Against vLLM with its default flags",
            "The same host, both engines up for the whole run and taking turns, repetition after "
            "repetition (the best of each side shown, every repetition in the last column): vLLM started "
            "with the model and an address only (`python -m vllm.entrypoints.openai.api_server --model M "
            "--served-model-name N --host H --port P`: its own block size, batch limits and scheduling, "
            "graph compilation on; the KV cache size the CPU build needs from its users, "
            "`VLLM_CPU_KVCACHE_SPACE`, as the product's), and the product's engine with its settings"
            f"{engine_mode}. "
            f"Chat: {result['chats']} concurrent chats of {result['max_tokens']} tokens, straight to each "
            "engine over streaming HTTP and end to end through the product's WebSocket. Bulk: the same "
            "documents summarized (the bulk jobs' instruction and temperature) straight to each engine at "
            "the bulk workers' concurrency, and as a bulk job through a Celery worker on the product's "
            "engine.",
            table(
                [
                    "workload",
                    "vLLM, default flags",
                    "the product's engine, straight",
                    "the product",
                    "engine / vLLM",
                    "product / vLLM",
                    "repetitions",
                ],
                rows,
            ),
            f"Targets: chat tokens/s at {result['chats']} concurrent at least 1.2× — "
            f"{result['chat_ratio']:.2f}×, {verdict(result['chat_ratio'] >= 1.2)}; bulk documents per "
            "minute at least 1.5× — "
            f"{result['bulk_ratio']:.2f}×, {verdict(result['bulk_ratio'] >= 1.5)}.",
        ]
    )
