"""Section 3: prefix caching over 8-turn conversations, and the turn-8 ratio by history length."""

from pathlib import Path

import matplotlib.pyplot as plt

from bench.report.blocks import PRODUCT, RAW, fmt, table, verdict


def section(result: dict, folder: Path) -> str:
    on, off = result["on"], result["off"]
    turns = [t["turn"] for t in on["product"]]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    left.plot(
        turns, [t["ttft_ms"] for t in off["product"]], "o-", color="#dc2626", label="product, caching off"
    )
    left.plot(turns, [t["ttft_ms"] for t in on["product"]], "o-", color=PRODUCT, label="product, caching on")
    left.plot(turns, [t["ttft_ms"] for t in off["raw"]], "x--", color="#f87171", label="raw, caching off")
    left.plot(turns, [t["ttft_ms"] for t in on["raw"]], "x--", color=RAW, label="raw, caching on")
    left.set(xlabel="turn", ylabel="ms (log)", title="Time to first token by turn", yscale="log")
    right.plot(
        turns, [t["prompt_tokens"] for t in on["product"]], "o-", color="#9ca3af", label="prompt tokens"
    )
    right.plot(turns, [t["cached_tokens"] for t in on["product"]], "o-", color=PRODUCT, label="cached (on)")
    right.plot(
        turns, [t["cached_tokens"] for t in off["product"]], "o-", color="#dc2626", label="cached (off)"
    )
    right.set(xlabel="turn", ylabel="tokens", title="Prompt tokens served from the cache (product)")
    for axis in (left, right):
        axis.legend(fontsize=8)
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(folder / "prefix.png", dpi=110)
    plt.close(figure)
    rows = [
        [
            p_on["turn"],
            p_on["prompt_tokens"],
            f"{fmt(p_off['ttft_ms'])} / {fmt(p_on['ttft_ms'])}",
            f"{fmt(r_off['ttft_ms'])} / {fmt(r_on['ttft_ms'])}",
            f"{p_off['cached_tokens']} / {p_on['cached_tokens']}",
        ]
        for p_on, p_off, r_on, r_off in zip(on["product"], off["product"], on["raw"], off["raw"], strict=True)
    ]
    speedup = result["turn8_speedup_product"]
    return "\n\n".join(
        [
            "## 3. Prefix caching over 8-turn conversations",
            f"{result['conversations']} conversation(s) per mode (medians shown), a ~440-token system "
            f"prompt, answers of {result['max_tokens']} tokens at most, one turn at a time. "
            "Each cell: caching off / on.",
            table(["turn", "prompt tokens", "product TTFT ms", "raw TTFT ms", "product cached tokens"], rows),
            "![Prefix caching](benchmarks/prefix.png)",
            f"Target: at turn 8, at least 10 times lower TTFT with caching — the product {speedup:.1f}× "
            f"(the raw engine {result['turn8_speedup_raw']:.1f}×), {verdict(speedup >= 10)}.",
            *length_parts(result.get("turn8_by_length")),
        ]
    )


def length_parts(by_length: dict | None) -> list[str]:
    """The turn-8 ratio by history length (raw engine, system prompt repeated), if measured."""
    if not by_length:
        return []
    points = by_length["points"]
    crossing = by_length["crosses_10x_at_prompt_tokens"]
    rows = [[point["prompt_tokens"], f"{point['ratio']:.1f}×"] for point in points]
    if crossing is None:
        top = max(points, key=lambda point: point["ratio"])
        where = (
            f"it does not cross 10× within the lengths measured: the most is {top['ratio']:.1f}× at "
            f"{top['prompt_tokens']:,} tokens"
        )
    else:
        where = f"it crosses 10× at about {crossing:,} prompt tokens at turn 8"
    return [
        "The same conversation straight to each engine with the system prompt repeated 1 to 4 times: "
        f"turn-8 TTFT without caching over with it, by the turn's prompt length; {where}.",
        table(["turn-8 prompt tokens", "TTFT off / on"], rows),
    ]
