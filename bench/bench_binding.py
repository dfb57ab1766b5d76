"""Benchmark 9: where the engine's threads run (vLLM's CPU thread binding, CPU hosts).

The shipped engine started three ways, one after the other, with the same chats through the
product's WebSocket (32 at once, 64 tokens each, benchmark 1's prompts) and straight to the
engine: vLLM's automatic binding as vLLM ships it (its compute threads on the physical cores, one
core kept for its scheduler and everything else: on a 2-core host, the model on one core and the
web tier, Redis and the engine's API server on the other), the same with no core kept (what the
product's launcher sets, VLLM_CPU_NUM_OF_RESERVED_CPU=0: the model on every core, shared with the
web tier), and not bound at all (the threads float). Reports tokens/s, time to first token and
the web process's CPU per token of each.
Target: none of its own; it decides the binding the product sets (docs/benchmarks.md).
"""

import contextlib
import os

from bench import setup
from bench.bench_streaming import MAX_TOKENS, jobs_for, raw_and_product
from bench.processes import engine_config, engine_process, redis_running
from bench.results import arguments, engine_settings, save

CHATS = 32


AUTO = {"VLLM_CPU_OMP_THREADS_BIND": "auto"}
BINDINGS = {
    "vLLM's default: one core kept": {**AUTO, "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"},
    "the product's: no core kept": {**AUTO, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    "not bound": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"},
}


@contextlib.contextmanager
def bound(variables: dict[str, str]):
    """The engine started inside sees `variables` (and no other binding of the caller's)."""
    names = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU")
    before = {name: os.environ.pop(name, None) for name in names}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in before.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


def parser():
    return arguments(__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> dict:
    options = parser().parse_args(argv)
    jobs = jobs_for(CHATS, options.quick)
    config = engine_config()
    runs = {}
    with redis_running():
        for number, (name, variables) in enumerate(BINDINGS.items()):
            with bound(variables), engine_process(config, f"binding-{number}") as (url, api_pid):
                raw, product = raw_and_product(url, api_pid, CHATS, jobs)
            runs[name] = {"environment": variables, "raw": raw, "product": product}
            print(name, raw["tokens_per_s"], product["tokens_per_s"], flush=True)
    result = {
        "benchmark": "binding",
        "quick": options.quick,
        "chats": CHATS,
        "max_tokens": MAX_TOKENS,
        "engine": engine_settings(config),
        "runs": runs,
    }
    save(options.output, "binding", result)
    return result


if __name__ == "__main__":
    setup()
    main()
