"""Section 9: where the engine's threads run."""

from pathlib import Path

from bench.report.blocks import fmt, table


def section(result: dict, folder: Path) -> str:
    rows = [
        [
            f"{name} ({', '.join(f'`{k}={v}`' for k, v in run['environment'].items())})",
            fmt(run["raw"]["tokens_per_s"]),
            fmt(run["product"]["tokens_per_s"]),
            f"{fmt(run['raw']['ttft_p50_ms'], 0)} / {fmt(run['product']['ttft_p50_ms'], 0)}",
            fmt(run["product"].get("web_cpu_ms_per_token"), 3),
        ]
        for name, run in result["runs"].items()
    ]
    best = max(result["runs"], key=lambda name: result["runs"][name]["product"]["tokens_per_s"] or 0)
    return "\n\n".join(
        [
            "## 9. Where the engine's threads run (`VLLM_CPU_OMP_THREADS_BIND`)",
            f"The shipped engine started three ways, {result['chats']} chats of {result['max_tokens']} "
            "tokens straight to it and through the product: vLLM's automatic binding as it ships (one "
            "core kept off the model for its scheduler and the rest), the same keeping none (what the "
            "product's launcher sets), and not bound.",
            table(
                [
                    "binding",
                    "raw tokens/s",
                    "product tokens/s",
                    "TTFT p50 ms, raw / product",
                    "web CPU ms/token",
                ],
                rows,
            ),  # fmt: skip
            f"Most product tokens/s: {best}.",
        ]
    )
