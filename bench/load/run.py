"""`make loadtest`: simulated users against the product on this box, and the check that nothing was lost.

Starts Redis, an engine (the fast stand-in, paced per stream and limited per batch, or vLLM) and the
product (one daphne, or nginx in front of several under supervisord) with bench.processes' helpers, makes
the users' sessions and API keys up front, runs locust headless on bench/load/locustfile.py, then checks
every answer a user saw end against the store (bench.load.check). Results go to var/loadtest/<time>/:
locust's CSV files (`locust_stats.csv`: ttft, gap and total per surface, with percentiles), the answers,
and `check.json`.

    python -m bench.load.run --users 20 --spawn-rate 5 --duration 60 --engine fast --topology single
"""

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

from django.conf import settings

from bench import setup
from bench.bench_relay import FastEngineProcess
from bench.load.model import Model
from bench.processes import (
    cluster_process,
    engine_config,
    engine_running,
    product_process,
    redis_running,
)
from harness.processes import ROOT


@contextlib.contextmanager
def engine(options: argparse.Namespace) -> Iterator[str]:
    if options.engine == "fast":
        with FastEngineProcess(options.token_interval, options.max_batch) as fast:
            yield fast.url
    else:
        with engine_running(engine_config()) as url:
            yield url


@contextlib.contextmanager
def product(options: argparse.Namespace, engine_url: str) -> Iterator[str]:
    environment = {"CHAT_MAX_TOKENS": str(options.max_tokens), "LOG_LEVEL": "WARNING"}
    if options.topology == "cluster":
        if shutil.which("nginx") is None:
            raise SystemExit("TOPOLOGY=cluster needs nginx: apt-get install nginx")
        with cluster_process(engine_url, options.web_processes, **environment) as (base, _):
            yield base
    else:
        with product_process(engine_url, **environment) as (base, _):
            yield base


def locust(options: argparse.Namespace, model: Model, base: str, plan: Path, out: Path) -> int:
    env = dict(
        os.environ,
        **model.environment(),
        LOAD_PLAN=str(plan),
        LOAD_ANSWERS=str(out / "answers.jsonl"),
        PYTHONPATH=str(ROOT),
    )
    command = [
        *(sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "load" / "locustfile.py")),
        *("--headless", "--host", base, "--users", str(options.users)),
        *("--spawn-rate", str(options.spawn_rate), "--run-time", f"{options.duration}s"),
        # Users finish the turn they are in (up to an answer's timeout), so every answer seen is checked.
        *("--stop-timeout", str(int(model.answer_timeout)), "--csv", str(out / "locust")),
        *("--only-summary", "--exit-code-on-error", "0", "--logfile", str(out / "locust.log")),
    ]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def main() -> None:
    # The users and the check reach the models, which load once Django is set up (bench.setup).
    from bench.load.check import check_answers, summary
    from bench.load.population import population

    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--users", type=int, default=50)
    cli.add_argument("--spawn-rate", type=float, default=5)
    cli.add_argument("--duration", type=int, default=120, help="seconds of load, after which users finish")
    cli.add_argument("--engine", choices=("fast", "vllm"), default="fast")
    cli.add_argument("--token-interval", type=float, default=0.02, help="fast engine: seconds between tokens")
    cli.add_argument(
        "--max-batch", type=int, default=256, help="fast engine: answers streamed at once; the rest wait"
    )
    cli.add_argument("--max-tokens", type=int, default=256, help="CHAT_MAX_TOKENS: tokens per answer")
    cli.add_argument("--topology", choices=("single", "cluster"), default="single")
    cli.add_argument("--web-processes", type=int, default=2, help="cluster: web processes behind nginx")
    cli.add_argument("--output", type=Path, default=Path(settings.DATA_DIR) / "loadtest")
    for field in fields(Model):
        cli.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    options = cli.parse_args()
    model = Model(**{field.name: getattr(options, field.name) for field in fields(Model)})
    out = options.output / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    (out / "parameters.json").write_text(json.dumps(vars(options), default=str, indent=1))
    with redis_running(), engine(options) as engine_url, product(options, engine_url) as base:
        with population(options.users, model.weights) as (plan, usernames):
            plan_file = out / "plan.json"
            plan_file.write_text(json.dumps(plan))
            try:
                code = locust(options, model, base, plan_file, out)
                result = check_answers(out, usernames)
            finally:
                plan_file.unlink()
    result["locust_exit_code"] = code
    (out / "check.json").write_text(json.dumps(result, indent=1))
    print(summary(out / "locust_stats.csv", result, out))
    if code != 0 or not result["passed"]:
        raise SystemExit(1)


if __name__ == "__main__":
    setup()
    main()
