"""A stand-in for an engine far faster than this host's: the web tier's ceiling, measured alone.

The stand-in engine (harness.stand_in_engine) as a process of its own, answering every chat with
`max_tokens` one-word chunks, `--interval` seconds apart. It exists for the figures of
`bench.bench_relay` and the load test: the web tier's CPU per token, and how many tokens per
second one web process can relay, which no engine on a 2-core host can feed.
Every other benchmark, and every end-to-end test, runs vLLM.

    python -m bench.fast_engine --port 8123 [--interval 0.005] [--max-batch 64 [--step-growth 1]]
"""

import argparse
import asyncio

from harness.stand_in_engine import StandInEngine, serve_forever

if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--port", type=int, required=True)
    cli.add_argument("--interval", type=float, default=0.0)
    cli.add_argument("--model", default="fast")
    cli.add_argument("--max-batch", type=int, default=0, help="answers streaming at once (0: no limit)")
    cli.add_argument(
        "--step-growth",
        type=float,
        default=0.0,
        help="with --max-batch: how much slower a full batch streams",
    )
    options = cli.parse_args()
    engine = StandInEngine(
        interval=options.interval,
        model=options.model,
        max_batch=options.max_batch,
        step_growth=options.step_growth,
    )
    asyncio.run(serve_forever(engine, options.port))
