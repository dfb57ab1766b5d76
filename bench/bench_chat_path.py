"""The chat path's cost per token on one web process: its CPU, and the Redis commands per frame.

N users each ask one answer over the page's WebSocket, from the paced stand-in engine
(bench.fast_engine), on one daphne process with a Redis of its own; with `--tabs 2` a second
socket of each user follows the same answer (`chat.resume`), as a second tab does. What is
measured: the web process's CPU seconds (user + system, from its own rusage in /proc) over the
tokens its sockets delivered, and Redis's INFO commandstats difference over the frames written
(a token frame a token here, the stand-in sending one word a chunk, plus one closing frame an
answer): commands a frame, a token, and by command. CPU seconds from the process's own rusage
count only what that process ran, so they shift less than wall time when other work shares the
host; they still grow somewhat with cache and scheduler contention.

Targets (issue 43): at most 1.5 Redis commands a frame, fewer a token.

    python -m bench.bench_chat_path [--quick] [--users 32] [--tokens 256] [--pace 0.02] [--tabs 1]
"""

import asyncio
import json
import os
import secrets
import statistics

import redis
import websockets
from django.conf import settings

from bench import setup
from bench.bench_relay import FastEngineProcess
from bench.load.steps import Profile
from bench.processes import bench_users, cpu_seconds, logs, product_environment, product_process
from bench.results import arguments, save
from harness.processes import free_port, redis_serving

# py-spy's sampling, about one round's length.
PROFILE_SECONDS = 10
# What a round's own reads of INFO add to the counts.
INFO_CALLS = 1


def commandstats(url: str) -> tuple[dict[str, int], int]:
    """The calls of each command, and the microseconds all took."""
    with redis.Redis.from_url(url) as client:
        stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
    return calls, sum(int(value["usec"]) for value in stats.values())


async def _answer(url: str, origin: str, cookie: str, tabs: int) -> tuple[int, int, bool]:
    """One user's answer, followed by `tabs` sockets: (its tokens, the token frames the first
    socket showed, whether every socket saw seqs 0..n-1 once each, in order, and the same text)."""
    headers = {"Cookie": f"sessionid={cookie}"}
    sockets = [await websockets.connect(url, origin=origin, additional_headers=headers) for _ in range(tabs)]
    try:
        await sockets[0].send(json.dumps({"type": "chat.send", "conversation": None, "content": "Hi."}))
        first = json.loads(await sockets[0].recv())
        message = first["message"]
        for extra in sockets[1:]:
            await extra.send(json.dumps({"type": "chat.resume", "message": message, "after": -1}))
        seen = await asyncio.gather(*(_tokens(socket) for socket in sockets))
    finally:
        for socket in sockets:
            await socket.close()
    frames = [shown for shown, _ in seen]
    whole = all(f == frames[0] for f in frames) and [seq for seq, _ in frames[0]] == list(
        range(len(frames[0]))
    )
    return seen[0][1], len(frames[0]), whole


async def _tokens(socket) -> tuple[list[tuple[int, str]], int]:
    frames = []
    while True:
        frame = json.loads(await asyncio.wait_for(socket.recv(), 120))
        if frame["type"] == "chat.token":
            frames.append((frame["seq"], frame["text"]))
        elif frame["type"] in {"chat.done", "chat.error"}:
            return frames, (frame.get("usage") or {}).get("completion_tokens") or len(frames)


async def round_(base_url: str, cookies: list[str], tabs: int, redis_url: str, pid: int) -> dict:
    url, (before_calls, before_usec) = (
        base_url.replace("http://", "ws://") + "/ws/chat/",
        commandstats(redis_url),
    )
    before_cpu = cpu_seconds(pid)
    results = await asyncio.gather(*(_answer(url, base_url, cookie, tabs) for cookie in cookies))
    # The answers' last writes (the closing frame's) come before their sockets hear of them.
    await asyncio.sleep(0.5)
    spent = cpu_seconds(pid) - before_cpu
    after, after_usec = commandstats(redis_url)
    calls = {name: after[name] - before_calls.get(name, 0) for name in after}
    calls["info"] -= INFO_CALLS
    calls = {name: n for name, n in sorted(calls.items(), key=lambda item: -item[1]) if n}
    tokens = sum(made for made, _, _ in results)
    frames = sum(shown for _, shown, _ in results) + len(results)
    total = sum(calls.values())
    return {
        "tokens": tokens,
        "frames": frames,
        "whole": all(whole for *_, whole in results),
        "web_cpu_ms_per_token": round(spent * 1000 / tokens, 4),
        "redis_commands_per_frame": round(total / frames, 3),
        "redis_commands_per_token": round(total / tokens, 3),
        "redis_us_per_token": round((after_usec - before_usec) / tokens, 2),
        "redis_calls": calls,
    }


def paced_arguments(description: str):
    """The flags of a benchmark of N users' answers from the paced stand-in engine, in rounds."""
    cli = arguments(description)
    cli.add_argument("--users", type=int, default=32)
    cli.add_argument("--tokens", type=int, default=256, help="tokens an answer")
    cli.add_argument("--pace", type=float, default=0.02, help="seconds between one answer's tokens")
    cli.add_argument("--rounds", type=int, default=3, help="rounds measured (quick: 1)")
    return cli


def paced_options(cli, argv: list[str] | None):
    options = cli.parse_args(argv)
    if options.quick:
        options.rounds = 1
    return options


def parser():
    cli = paced_arguments(__doc__.splitlines()[0])
    cli.add_argument("--tabs", type=int, default=1, help="sockets following each answer")
    cli.add_argument("--profile", action="store_true", help="py-spy over one more round: its top frames")
    cli.add_argument("--label", default="", help="saved as chat_path-LABEL.json")
    return cli


def main(argv: list[str] | None = None) -> dict:
    options = paced_options(parser(), argv)
    redis_url = settings.REDIS_URL
    rounds = []
    with redis_serving(redis_url, bundled=True), FastEngineProcess(options.pace) as engine:
        environment = product_environment(system_prompt="Be brief.", max_tokens=options.tokens)
        with product_process(engine.url, **environment) as (base_url, daphne):
            with bench_users(options.users) as cookies:
                asyncio.run(round_(base_url, cookies[:1], options.tabs, redis_url, daphne.pid))  # warm
                for _ in range(options.rounds):
                    rounds.append(asyncio.run(round_(base_url, cookies, options.tabs, redis_url, daphne.pid)))
                    print({k: v for k, v in rounds[-1].items() if k != "redis_calls"}, flush=True)
                if options.profile:
                    profile = Profile(daphne.pid, PROFILE_SECONDS, logs() / "chat_path-profile.txt")
                    with profile:
                        asyncio.run(round_(base_url, cookies, options.tabs, redis_url, daphne.pid))
    result = {
        "benchmark": "chat_path",
        "topology": "one daphne process, its own bundled Redis, the paced stand-in engine",
        **{k: v for k, v in vars(options).items() if k not in {"output", "quick", "repeats", "label"}},
        "web_cpu_ms_per_token": spread([r["web_cpu_ms_per_token"] for r in rounds]),
        "redis_commands_per_frame": spread([r["redis_commands_per_frame"] for r in rounds]),
        "redis_commands_per_token": spread([r["redis_commands_per_token"] for r in rounds]),
        "redis_us_per_token": spread([r["redis_us_per_token"] for r in rounds]),
        "rounds": rounds,
        "profile": profile.top() if options.profile else None,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}), flush=True)
    if options.profile:
        print("profile:", json.dumps(result["profile"], indent=1), flush=True)
    print("commands of the last round:", rounds[-1]["redis_calls"], flush=True)
    save(options.output, "-".join(filter(None, ["chat_path", options.label])), result)
    return result


def spread(values: list[float]) -> dict:
    """Median, min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


if __name__ == "__main__":
    # A Redis of its own, for the run and the processes it starts: its counts are this run's alone.
    os.environ["REDIS_URL"] = f"redis://:{secrets.token_hex(16)}@127.0.0.1:{free_port()}/0"
    setup()
    main()
