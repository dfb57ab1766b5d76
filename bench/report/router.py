"""Section 7: several engine replicas behind vLLM's router, by routing policy."""

from pathlib import Path

from bench.report.blocks import fmt, table, verdict


def section(result: dict, folder: Path) -> str:
    runs = result["runs"]
    rows = [
        [
            name,
            f"{run['hit_rate'] * 100:.1f}%" if run["hit_rate"] is not None else "–",
            f"{run['computed_prompt_tokens']:,}",
            run["turn8_cached_tokens_p50"],
            fmt(run["turn8_ttft_p50_ms"]),
            fmt(run["ttft_p50_ms"]),
            fmt(run["tokens_per_s"]),
        ]
        for name, run in runs.items()
    ]
    one = runs["one engine"]
    chosen, spread = runs["2 replicas, consistent_hash"], runs["2 replicas, round_robin"]
    ratio = result["hit_rate_vs_one_engine"] or 0
    above = (chosen["hit_rate"] or 0) - (spread["hit_rate"] or 0)
    devices = ", ".join(
        " ".join(f"{k}={v}" for k, v in d.items()) or "no binding" for d in result["replica_devices"]
    )
    return "\n\n".join(
        [
            "## 7. Several engine replicas behind vLLM's router",
            f"{result['conversations']} conversations of 8 turns at a time (section 3's: a ~440-token "
            f"system prompt, answers of {result['max_tokens']} tokens at most, temperature 0), each "
            "turn sent as the product sends it: the conversation as `X-Session-ID`, a cache salt of "
            "the conversation's own (only its own history can hit). To one engine as a one-engine "
            "`make run` starts it, "
            f"then to two replicas, each on its own share of the host ({devices}), behind "
            "vllm-router with each policy. Hit rate: cached over prompt tokens, every turn.",
            table(
                [
                    "engines",
                    "prefix-cache hit rate",
                    "prompt tokens computed",
                    "turn-8 cached tokens",
                    "turn-8 TTFT p50 ms",
                    "TTFT p50 ms",
                    "tokens/s",
                ],
                rows,
            ),  # fmt: skip
            f"Target: the product's policy (`consistent_hash`) keeps at least 0.95× one engine's hit rate — "
            f"{ratio:.2f}× ({(chosen['hit_rate'] or 0) * 100:.1f}% against "
            f"{(one['hit_rate'] or 0) * 100:.1f}%), "
            f"{verdict(ratio >= 0.95)}; and far above round-robin's ({(spread['hit_rate'] or 0) * 100:.1f}%, "
            f"{above * 100:+.1f} points: round-robin made the engines compute "
            f"{spread['computed_prompt_tokens'] / max(chosen['computed_prompt_tokens'], 1):.1f}× the prompt "
            "tokens).",
        ]
    )
