"""Benchmark 5: what one web process spends to relay a token, and the most it can relay.

An engine on this host makes a few hundred tokens a second; a GPU engine makes thousands,
and the web tier must keep up with it without taking the host's CPU from the engine.
Here the product runs against bench.fast_engine, which streams one-word chunks either as
fast as it can or at a set pace per answer, so what is measured is the web tier alone:
daphne's CPU time (user + system, from /proc) over the tokens its clients received, the
tokens per second they received, and how many WebSocket frames carried them (deltas that
arrive together travel as one frame). bench_streaming measures the same CPU per token
against vLLM, beside the engine's own API server.
Targets: one web process relays at least 4,000 tokens/s; at most 0.3 ms of its CPU per token.
"""

import asyncio
import subprocess
import sys

from bench import setup
from bench.clients import ProductChat, run_concurrently
from bench.processes import (
    bench_users,
    cpu_seconds,
    log_file,
    product_environment,
    product_process,
    redis_running,
)
from bench.results import arguments, save
from harness.processes import ROOT, free_port
from harness.waiting import wait_for

CHATS = 32
# (seconds between one answer's tokens, tokens per answer). 0: as fast as the fast engine can,
# far past what one web process relays a frame at a time, so deltas wait and travel together;
# 0.005: 200 tokens/s an answer, 6,400 offered in all, about the web tier's one-frame-a-token
# ceiling; 0.05: 20 tokens/s an answer, 640 in all, about what vLLM makes for 32 chats on this
# host, the answers of 128 tokens of the CPU-per-token target.
PACES = ((0.0, 1024), (0.005, 512), (0.05, 128))


class FastEngineProcess:
    def __init__(self, interval: float, max_batch: int = 0, step_growth: float = 0.0) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        port = self.url.rsplit(":", 1)[1]
        self._log = log_file(f"fast-engine-{interval}-{max_batch}-{step_growth}")
        self.process = subprocess.Popen(
            [
                *(sys.executable, "-m", "bench.fast_engine", "--port", port, "--interval", str(interval)),
                *("--max-batch", str(max_batch), "--step-growth", str(step_growth)),
            ],
            cwd=ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def __enter__(self) -> "FastEngineProcess":
        import httpx

        def up() -> bool:
            try:
                return httpx.get(self.url + "/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "the fast engine")
        return self

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(10)
        self._log.close()


async def relay(base_url: str, cookies: list[str], jobs: int, daphne_pid: int) -> dict:
    chats = [ProductChat(base_url, cookie) for cookie in cookies]
    for chat in chats:
        await chat.__aenter__()
    try:
        before = cpu_seconds(daphne_pid)
        answers, wall = await run_concurrently(
            len(chats), ["Tell me something."] * jobs, lambda i, p: chats[i].ask(p, new_conversation=True)
        )
        spent = cpu_seconds(daphne_pid) - before
    finally:
        for chat in chats:
            await chat.__aexit__(None, None, None)
    tokens = sum(a.completion_tokens for a in answers)
    frames = sum(len(a.gaps) + 1 for a in answers if a.ttft is not None)
    return {
        "requests": len(answers),
        "completion_tokens": tokens,
        "token_frames": frames,
        "tokens_per_frame": round(tokens / frames, 2) if frames else None,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "web_cpu_s": round(spent, 2),
        "web_cpu_ms_per_token": round(spent * 1000 / tokens, 3),
        "web_cpu_share": round(spent / wall, 2),
    }


def parser():
    return arguments(__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    jobs = CHATS * (2 if options.quick else 4)
    paces = []
    with redis_running():
        for pace, tokens in PACES:
            with FastEngineProcess(pace) as engine:
                environment = product_environment(system_prompt="Be brief.", max_tokens=tokens)
                with product_process(engine.url, **environment) as (base_url, daphne):
                    with bench_users(CHATS) as cookies:
                        asyncio.run(relay(base_url, cookies[:1], 1, daphne.pid))  # warm
                        runs = [
                            asyncio.run(relay(base_url, cookies, jobs, daphne.pid))
                            for _ in range(options.repeats or (1 if options.quick else 2))
                        ]
            top = max(runs, key=lambda run: run["tokens_per_s"])
            row = {"seconds_between_tokens": pace, "tokens": tokens, **top}
            row["runs"] = [r["tokens_per_s"] for r in runs]
            print(row, flush=True)
            paces.append(row)
    result = {"benchmark": "relay", "quick": options.quick, "chats": CHATS, "paces": paces}
    save(options.output, "relay", result)
    return result


if __name__ == "__main__":
    setup()
    main()
