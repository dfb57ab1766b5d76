"""`make loadtest`: simulated users against the product on this box, and the check that nothing was lost.

Starts Redis, an engine (the fast stand-in, paced per stream and limited per batch, or vLLM) and the
product (one daphne, or several under supervisord on one shared socket or behind nginx; one of them
restarted mid-step with `--restart-after`) with bench.processes' helpers, makes
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
import threading
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import fields
from pathlib import Path

from django.conf import settings

from bench import setup
from bench.bench_relay import FastEngineProcess
from bench.load import stores
from bench.load.model import Model
from bench.load.steps import Peaks, Profile, figures, take
from bench.processes import (
    cluster_process,
    engine_config,
    engine_running,
    product_process,
    restart_web,
    web_programs,
)
from harness.processes import ROOT, redis_serving
from harness.stand_in_engine import StandInEngine


@contextlib.contextmanager
def engine(options: argparse.Namespace) -> Iterator[str]:
    if options.engine == "fast":
        with FastEngineProcess(options.token_interval, options.max_batch, options.step_growth) as fast:
            yield fast.url
    else:
        with engine_running(engine_config()) as url:
            yield url


@contextlib.contextmanager
def product(options: argparse.Namespace, engine_url: str) -> Iterator[tuple[str, list[int]]]:
    """The product's base URL and its web processes' pids."""
    environment = {"CHAT_MAX_TOKENS": str(options.max_tokens), "LOG_LEVEL": "WARNING"}
    if options.topology == "cluster" and shutil.which("nginx") is None:
        raise SystemExit("TOPOLOGY=cluster needs nginx: apt-get install nginx")
    if options.topology in ("cluster", "shared"):
        nginx = options.topology == "cluster"
        with cluster_process(engine_url, options.web_processes, nginx=nginx, **environment) as (base, pids):
            yield base, pids
    else:
        with product_process(engine_url, **environment) as (base, process):
            yield base, [process.pid]


@contextlib.contextmanager
def bulk_job(options: argparse.Namespace, engine_url: str) -> Iterator[object | None]:
    """With `--bulk N`: a Celery worker on the bulk queue and a job of N documents submitted as the
    ramp begins, summarizing through the same engine below the chat's priority while it lasts."""
    if not options.bulk:
        yield None
        return
    from bench.bench_bulk_chat import document, submit_job
    from bench.processes import celery_worker

    with celery_worker(engine_url):
        yield submit_job([document(seed, 40) for seed in range(options.bulk)])


def job_state(job) -> dict | None:
    """The bulk job's status and documents done so far."""
    if job is None:
        return None
    from jobs.selectors import job_progress

    job.refresh_from_db()
    return {"status": job.status, "done": job_progress(job=job).done}


def engine_gap_ms(options: argparse.Namespace, running: float) -> float:
    """The engine's own time between tokens with `running` answers in its batch (the fast engine's
    pace, harness.stand_in_engine); vLLM's is read from its own metrics instead (0 here)."""
    if options.engine != "fast":
        return 0.0
    engine = StandInEngine(
        interval=options.token_interval, max_batch=options.max_batch, step_growth=options.step_growth
    )
    engine.running = max(int(running), 1)
    return engine.pace() * 1000


@contextlib.contextmanager
def restarting(options: argparse.Namespace, pids: list[int]) -> Iterator[dict]:
    """With `--restart-after S`: the first web process restarted S seconds into the step, as `make
    restart` restarts each (it drains, then starts again), while the users' sockets stay open; its
    pid in `pids` is the new one's, and the dict says when it went and came back."""
    if options.restart_after is None:
        yield {}
        return
    if options.topology == "single":
        raise SystemExit("--restart-after needs several web processes: --topology shared or cluster")
    when: dict = {}
    program = web_programs(options.web_processes, nginx=options.topology == "cluster")[0]

    def restart() -> None:
        time.sleep(options.restart_after)
        started = time.monotonic()
        pids[0] = restart_web(program)
        when.update(
            program=program, after_s=options.restart_after, took_s=round(time.monotonic() - started, 1)
        )

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    try:
        yield when
    finally:
        thread.join()


def locust(options: argparse.Namespace, model: Model, base: str, plan: Path, out: Path, users: int) -> int:
    env = dict(
        os.environ,
        **model.environment(),
        LOAD_PLAN=str(plan),
        LOAD_ANSWERS=str(out / "answers.jsonl"),
        LOAD_PROCESSES=str(options.processes),
        PYTHONPATH=str(ROOT),
    )
    command = [
        *(sys.executable, "-m", "locust", "-f", str(ROOT / "bench" / "load" / "locustfile.py")),
        *("--headless", "--host", base, "--users", str(users)),
        *("--spawn-rate", str(options.spawn_rate), "--run-time", f"{options.duration}s"),
        *(("--processes", str(options.processes)) if options.processes > 1 else ()),
        # Users finish the turn they are in (up to an answer's timeout), so every answer seen is checked.
        *("--stop-timeout", str(int(model.answer_timeout)), "--csv", str(out / "locust")),
        *("--only-summary", "--exit-code-on-error", "0", "--logfile", str(out / "locust.log")),
    ]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def main(chosen: stores.Stores) -> None:
    # The users and the check reach the models, which load once Django is set up (bench.setup).
    from django.core.management import call_command

    from bench.load.check import check_answers, summary
    from bench.load.population import population

    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--users", type=int, default=50)
    cli.add_argument(
        "--steps",
        type=lambda text: [int(users) for users in text.split(",")],
        help="a ramp: users at each step (e.g. 1000,5000,10000), each --duration seconds; replaces --users",
    )
    cli.add_argument("--spawn-rate", type=float, default=5)
    cli.add_argument("--bulk", type=int, default=0, help="documents of a bulk job running in the background")
    cli.add_argument(
        "--profile", action="store_true", help="sample the (first) web process with py-spy at each step"
    )
    cli.add_argument("--processes", type=int, default=1, help="locust's processes (its --processes)")
    cli.add_argument("--duration", type=int, default=120, help="seconds of load, after which users finish")
    cli.add_argument("--engine", choices=("fast", "vllm"), default="fast")
    cli.add_argument("--token-interval", type=float, default=0.02, help="fast engine: seconds between tokens")
    cli.add_argument(
        "--max-batch", type=int, default=256, help="fast engine: answers streamed at once; the rest wait"
    )
    cli.add_argument(
        "--step-growth",
        type=float,
        default=1.0,
        help="fast engine: how much slower each stream goes with a full batch than alone (1: twice as slow)",
    )
    cli.add_argument("--max-tokens", type=int, default=256, help="CHAT_MAX_TOKENS: tokens per answer")
    cli.add_argument(
        "--topology",
        choices=("single", "shared", "cluster"),
        default="single",
        help="one daphne; `make run`'s web processes on one shared socket; or nginx in front of them",
    )
    cli.add_argument("--web-processes", type=int, default=2, help="shared, cluster: web processes")
    cli.add_argument(
        "--restart-after",
        type=float,
        help="restart the first web process this many seconds into each step (shared, cluster)",
    )
    cli.add_argument("--output", type=Path, default=Path(settings.DATA_DIR) / "loadtest")
    cli.add_argument(
        stores.FLAG,
        action="store_true",
        help="run on the product's DATABASE_URL and REDIS_URL (default: its own, bench.load.stores)",
    )
    for field in fields(Model):
        cli.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    options = cli.parse_args()
    model = Model(**{field.name: getattr(options, field.name) for field in fields(Model)})
    out = options.output / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True)
    (out / "parameters.json").write_text(json.dumps(vars(options), default=str, indent=1))
    steps = options.steps or [options.users]
    where = "its own" if chosen.own_redis else "REDIS_URL's"
    print(f"Load test on the database {settings.DATABASES['default']['NAME']} and Redis {where}")
    call_command("migrate", interactive=False, verbosity=0)
    rows, results, codes = [], [], []
    with (
        redis_serving(settings.REDIS_URL, bundled=chosen.own_redis),
        engine(options) as engine_url,
        product(options, engine_url) as (base, pids),
    ):
        with population(max(steps), model.weights) as (plan, usernames), bulk_job(options, engine_url) as job:
            plan_file = out / "plan.json"
            plan_file.write_text(json.dumps(plan))
            idle = take(base, pids, settings.REDIS_URL)
            try:
                for users in steps:
                    step = out / f"step-{users}" if options.steps else out
                    step.mkdir(exist_ok=True)
                    before = take(base, pids, settings.REDIS_URL)
                    profile = Profile(pids[0], options.duration, step / "profile.txt")
                    with (
                        Peaks(base, pids, engine_url) as peaks,
                        profile if options.profile else nullcontext(),
                        restarting(options, pids) as restarted,
                    ):
                        codes.append(locust(options, model, base, plan_file, step, users))
                    after = take(base, pids, settings.REDIS_URL)
                    results.append(check_answers(step, usernames))
                    gap = engine_gap_ms(options, peaks.engine_running)
                    rows.append(
                        {
                            **figures(
                                users, before, after, peaks, idle.rss_bytes, step / "locust_stats.csv", gap
                            ),
                            "check_passed": results[-1]["passed"],
                            "errors": results[-1]["errors"],
                            "errors_other_than_busy": sum(results[-1]["errors"].values()),
                            "stored_unlike_streamed": results[-1]["mismatch_count"],
                            "restart": restarted or None,
                            "reconnects": results[-1]["reconnects"],
                            "profile": profile.top() if options.profile else None,
                            "bulk_job": job_state(job),
                        }
                    )
                    (step / "check.json").write_text(json.dumps(results[-1], indent=1))
                    # Written at each step: a later step that fails leaves the earlier ones' figures.
                    (out / "steps.json").write_text(json.dumps(rows, indent=1))
                    print(summary(step / "locust_stats.csv", results[-1], step))
            finally:
                plan_file.unlink()
    print(json.dumps(rows, indent=1))
    if any(codes) or not all(result["passed"] for result in results):
        raise SystemExit(1)


if __name__ == "__main__":
    # Before the settings are read: the run's stores are its own (bench.load.stores).
    chosen = stores.choose(os.environ, on_product_stores=stores.FLAG in sys.argv)
    stores.configure(os.environ, chosen)
    setup()
    main(chosen)
