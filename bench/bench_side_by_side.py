"""Side by side with Open WebUI: web CPU per token of this product's chat path, of Open WebUI's chat
path and of its bare proxy, on the same paced stand-in engine, in one window.

One paced stand-in engine (bench.fast_engine) feeds three web servers started together: the
product (one daphne process, a bundled Redis of its own, as bench.bench_chat_path), and Open WebUI
0.12.4 (`make openwebui`: a virtualenv of its own; `open-webui serve`, one uvicorn process, its
SQLite in a fresh data folder, offline). Each round, N users each ask one answer at once: through
the product's page's WebSocket; through Open WebUI's chat path as its page drives it (socket.io,
the chat made and stored by the server, the answer as socket events); and through its bare proxy
(`/api/chat/completions`, no chat, no socket, no store). bench/openwebui_client.py drives Open WebUI
from its own virtualenv. The rounds interleave (product, chat path, bare proxy, then again), so
the host's load, shared with other work, falls on the three alike. What is measured: the web
process's CPU seconds (user + system, its own rusage in /proc, with any children) over the tokens
its clients received; medians of the rounds and their spread; the host's load average at each
round's end.

Target (issue 43): the product's chat path at no more web CPU per token than Open WebUI's bare proxy.

    make openwebui && python -m bench.bench_side_by_side [--quick] [--users 32] [--tokens 256] \
        [--pace 0.02] [--rounds 3]
"""

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from django.conf import settings

from bench import setup
from bench.bench_chat_path import paced_arguments, paced_options, spread
from bench.bench_chat_path import round_ as product_round
from bench.bench_relay import FastEngineProcess
from bench.processes import bench_users, log_file, logs, product_environment, product_process
from bench.results import ROOT, save
from harness.processes import free_port, redis_serving
from harness.waiting import wait_for

OPENWEBUI_VERSION = "0.12.4"
CLIENT = ROOT / "bench" / "openwebui_client.py"
SIDES = ("product", "openwebui_chat", "openwebui_proxy")
# Open WebUI's start: its migrations, then its embedding model looked for offline and not found
# (retrieval is not used here); about 40 s on this host.
OPENWEBUI_START_SECONDS = 300


def openwebui_python() -> Path:
    """Open WebUI's virtualenv's Python, as `make openwebui` makes it."""
    venv = Path(settings.DATA_DIR) / "openwebui-venv"
    if not (venv / f".installed-{OPENWEBUI_VERSION}").exists():
        raise SystemExit(f"Open WebUI {OPENWEBUI_VERSION} is not installed in {venv}: run `make openwebui`")
    return venv / "bin" / "python"


@contextlib.contextmanager
def openwebui_process(engine_url: str) -> Iterator[tuple[str, int]]:
    """`open-webui serve` against `engine_url`, offline, on a fresh data folder: (base URL, pid).
    Its environment is its own: the product's (REDIS_URL, DATABASE_URL, keys) would be read by it."""
    data = logs() / "openwebui-data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(data)),
        "LANG": "C.UTF-8",
        "DATA_DIR": str(data),
        "WEBUI_SECRET_KEY": secrets.token_urlsafe(32),
        "OPENAI_API_BASE_URL": f"{engine_url}/v1",
        "OPENAI_API_KEY": "none",
        "ENABLE_OLLAMA_API": "false",
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "BYPASS_MODEL_ACCESS_CONTROL": "true",
        # 32 chats made at once on a loaded host outwait SQLite's default 5 s for the write lock
        # ("database is locked", a 400); waiting spends no CPU.
        "DATABASE_SQLITE_PRAGMA_BUSY_TIMEOUT": "60000",
    }
    python = openwebui_python()
    log = log_file("openwebui")
    process = subprocess.Popen(
        [python.parent / "open-webui", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=data,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"Open WebUI exited ({process.returncode}): see {log.name}")
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, OPENWEBUI_START_SECONDS, "Open WebUI")
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()


def openwebui(*args: str) -> dict:
    """bench/openwebui_client.py in Open WebUI's virtualenv: what it printed."""
    done = subprocess.run(
        [openwebui_python(), CLIENT, *args], capture_output=True, text=True, timeout=600, check=False
    )
    if done.returncode:
        raise RuntimeError(f"openwebui_client {args[0]} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def load() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def parser():
    return paced_arguments(__doc__.splitlines()[0])


def main(argv: list[str] | None = None) -> dict:
    options = paced_options(parser(), argv)
    redis_url = settings.REDIS_URL
    rounds = {side: [] for side in SIDES}
    with redis_serving(redis_url, bundled=True), FastEngineProcess(options.pace) as engine:
        environment = product_environment(system_prompt="Be brief.", max_tokens=options.tokens)
        with (
            product_process(engine.url, **environment) as (base_url, daphne),
            bench_users(options.users) as cookies,
            openwebui_process(engine.url) as (openwebui_url, openwebui_pid),
        ):
            users = openwebui("users", "--url", openwebui_url, "--count", str(options.users))
            every, first = logs() / "openwebui-users.json", logs() / "openwebui-first-user.json"
            every.write_text(json.dumps(users))
            first.write_text(json.dumps({**users, "tokens": users["tokens"][:1]}))

            def measure(side: str, given: Path) -> dict:
                if side == "product":
                    group = cookies if given == every else cookies[:1]
                    made = asyncio.run(product_round(base_url, group, 1, redis_url, daphne.pid))
                    return {k: made[k] for k in ("tokens", "whole", "web_cpu_ms_per_token")}
                path = "chat" if side == "openwebui_chat" else "proxy"
                return openwebui(
                    *("round", "--url", openwebui_url, "--pid", str(openwebui_pid), "--users", str(given)),
                    *("--path", path, "--max-tokens", str(options.tokens)),
                )

            for side in SIDES:  # warm: one answer each
                measure(side, first)
            window = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_before": load()}
            for number in range(options.rounds):
                for side in SIDES:
                    row = {**measure(side, every), "round": number + 1, "load_after": load()}
                    rounds[side].append(row)
                    print(side, row, flush=True)
            window.update(ended=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), load_after=load())
    figures = {side: spread([row["web_cpu_ms_per_token"] for row in rows]) for side, rows in rounds.items()}
    result = {
        "benchmark": "side_by_side",
        "topology": (
            "the product: one daphne process, its own bundled Redis, SQLite; Open WebUI "
            f"{OPENWEBUI_VERSION}: `open-webui serve` (one uvicorn process, SQLite, no Redis); "
            "both on the same paced stand-in engine, on this host"
        ),
        **{k: v for k, v in vars(options).items() if k not in {"output", "quick", "repeats"}},
        "window": window,
        "web_cpu_ms_per_token": figures,
        "product_over_proxy": round(figures["product"]["median"] / figures["openwebui_proxy"]["median"], 2),
        "product_over_openwebui_chat": round(
            figures["product"]["median"] / figures["openwebui_chat"]["median"], 2
        ),
        "every_answer_whole": all(row["whole"] for rows in rounds.values() for row in rows),
        "load_1min_at_round_ends": spread([row["load_after"][0] for rows in rounds.values() for row in rows]),
        "rounds": rounds,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}), flush=True)
    save(options.output, "side_by_side", result)
    return result


if __name__ == "__main__":
    # A Redis of its own, for the run and the processes it starts.
    os.environ["REDIS_URL"] = f"redis://:{secrets.token_hex(16)}@127.0.0.1:{free_port()}/0"
    setup()
    main()
