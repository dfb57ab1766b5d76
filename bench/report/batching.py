"""Section 2: continuous batching, the product at 32 chats against a `generate` loop."""

from pathlib import Path

import matplotlib.pyplot as plt

from bench.report.blocks import PRODUCT, RAW, table, verdict


def section(result: dict, folder: Path) -> str:
    loop, raw, product = result["generate_loop"], result["raw"], result["product"]
    figure, axis = plt.subplots(figsize=(6, 3.4))
    labels = [
        "transformers generate,\none at a time",
        "raw engine,\n32 concurrent",
        "product,\n32 concurrent",
    ]
    values = [loop["tokens_per_s"], raw["tokens_per_s"], product["tokens_per_s"]]
    bars = axis.bar(labels, values, color=["#9ca3af", RAW, PRODUCT])
    axis.bar_label(bars, fmt="%.0f")
    axis.set(ylabel="output tokens/s", title="Continuous batching")
    figure.tight_layout()
    figure.savefig(folder / "batching.png", dpi=110)
    plt.close(figure)
    speedup = result["product_speedup"]
    return "\n\n".join(
        [
            "## 2. Continuous batching: the product at 32 chats against a `generate` loop",
            f"The same {result['concurrency']} requests ({result['max_tokens']} output tokens at most, "
            "greedy decoding). "
            f"The loop served {loop['requests']} of them one after another, with the engine stopped "
            f"({loop['threads']} torch thread(s), {loop.get('dtype', 'bfloat16')}: the faster of bf16 and "
            "float32 and of one thread or all, probed first), with the checkpoint the engine serves.",
            table(
                ["", "requests", "output tokens", "wall s", "tokens/s"],
                [
                    [
                        "transformers generate loop",
                        loop["requests"],
                        loop["completion_tokens"],
                        loop["wall_s"],
                        loop["tokens_per_s"],
                    ],
                    [
                        "raw engine, 32 concurrent",
                        raw["requests"],
                        raw["completion_tokens"],
                        raw["wall_s"],
                        raw["tokens_per_s"],
                    ],
                    [
                        "product, 32 concurrent",
                        product["requests"],
                        product["completion_tokens"],
                        product["wall_s"],
                        product["tokens_per_s"],
                    ],
                ],
            ),  # fmt: skip
            "![Continuous batching](benchmarks/batching.png)",
            f"Target: at least 14 times the loop's tokens/s — the product reached {speedup:.1f}× "
            f"(the raw engine {result['raw_speedup']:.1f}×), {verdict(speedup >= 14)}.",
        ]
    )
