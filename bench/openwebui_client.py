"""Open WebUI driven as its page drives it, for bench.bench_side_by_side; run by Open WebUI's own
virtualenv's Python as a script (`make openwebui`), so it imports only that virtualenv's packages.

- `users`: the first signup (the admin), who adds `--count` users through the admin API: their
  session tokens and the model's id, as JSON.
- `round`: each of those users asks one answer at once, and the web process's CPU (user + system,
  from /proc, with any children: its workers) is read around them, as JSON.
  `--path chat`: what the page does for a new chat (src/lib/components/chat/Chat.svelte,
  sendMessageSocket): its socket.io connection (`user-join`), `POST /api/chat/completions` with the
  socket's id, the user message and the assistant message's id, so the server makes and stores the
  chat and streams the answer as socket events; then the chat's room joined and the sidebar's chat
  list read, and read again when the answer is done (chatCompletedHandler). Title, tag and
  follow-up generation are off, as a user's settings can turn them off: each is another engine
  call, not a cost of the tokens.
  `--path proxy`: the bare proxy, `POST /api/chat/completions` with only the model and messages, its
  SSE stream read to the end: no chat, no socket, no store.

    openwebui-venv/bin/python bench/openwebui_client.py users --url URL --count 32 > users.json
    openwebui-venv/bin/python bench/openwebui_client.py round --url URL --pid PID --users users.json \
        --path chat|proxy --max-tokens 256
"""

import argparse
import asyncio
import json
import time
import uuid

import httpx
import psutil

PASSWORD = "Bench-password-1"
PROMPT = "Hi."
# The answers' last writes (the stored message's) come after the last event.
SETTLE_SECONDS = 0.5
TIMEOUT = 120


def users(url: str, count: int) -> dict:
    """The admin (the first signup) and `count` users it adds; their tokens and the model."""
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        admin = client.post(
            "/api/v1/auths/signup",
            json={"name": "admin", "email": "admin@bench.example", "password": PASSWORD},
        )
        admin.raise_for_status()
        auth = {"Authorization": f"Bearer {admin.json()['token']}"}
        tokens = []
        for i in range(count):
            added = client.post(
                "/api/v1/auths/add",
                headers=auth,
                json={
                    "name": f"user {i}",
                    "email": f"user{i}@bench.example",
                    "password": PASSWORD,
                    "role": "user",
                },
            )
            added.raise_for_status()
            tokens.append(added.json()["token"])
        models = client.get("/api/models", headers={"Authorization": f"Bearer {tokens[0]}"})
        models.raise_for_status()
    return {"tokens": tokens, "model": models.json()["data"][0]["id"]}


async def chat_path(url: str, token: str, model: str, max_tokens: int) -> tuple[str, int]:
    """One new chat as the page makes it: (the answer's text, the socket events it came in)."""
    import socketio

    auth = {"Authorization": f"Bearer {token}"}
    assistant_id, user_id = str(uuid.uuid4()), str(uuid.uuid4())
    text, events, done = [], 0, asyncio.Event()
    sio = socketio.AsyncClient(reconnection=False)

    @sio.on("events")
    async def on_event(event):
        nonlocal events
        if event.get("message_id") != assistant_id:
            return
        events += 1
        data = event.get("data") or {}
        body = data.get("data") or {}
        if data.get("type") == "response:completion" and body.get("type") == "response.output_text.delta":
            text.append(body["delta"])
        elif data.get("type") == "chat:completion" and body.get("done"):
            done.set()
        elif data.get("type") == "chat:message:error":
            done.set()

    await sio.connect(url, socketio_path="/ws/socket.io", auth={"token": token}, transports=["websocket"])
    try:
        await sio.call("user-join", {"auth": {"token": token}}, timeout=TIMEOUT)
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=TIMEOUT) as client:
            started = await client.post(
                "/api/chat/completions",
                json={
                    "stream": True,
                    "model": model,
                    "params": {"max_tokens": max_tokens},
                    "tool_servers": [],
                    "features": {},
                    "variables": {},
                    "session_id": sio.get_sid(),
                    "id": assistant_id,
                    "parent_id": None,
                    "user_message": {
                        "id": user_id,
                        "parentId": None,
                        "childrenIds": [assistant_id],
                        "role": "user",
                        "content": PROMPT,
                        "timestamp": int(time.time()),
                        "models": [model],
                    },
                    "background_tasks": {
                        "title_generation": False,
                        "tags_generation": False,
                        "follow_up_generation": False,
                    },
                },
            )
            if started.is_error:
                raise RuntimeError(f"{started.status_code} {started.text}")
            chat_id = started.json()["chat_id"]
            await sio.call("events:chat", {"chat_id": chat_id, "data": {"type": "join"}}, timeout=TIMEOUT)
            (await client.get("/api/v1/chats/", params={"page": 1})).raise_for_status()
            await asyncio.wait_for(done.wait(), TIMEOUT)
            (await client.get("/api/v1/chats/", params={"page": 1})).raise_for_status()
    finally:
        await sio.disconnect()
    return "".join(text), events


async def bare_proxy(url: str, token: str, model: str, max_tokens: int) -> tuple[str, int]:
    """One answer from the bare proxy: (its text, the SSE events it came in)."""
    body = {
        "model": model,
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    text, events = [], 0
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client:
        headers = {"Authorization": f"Bearer {token}"}
        async with client.stream("POST", "/api/chat/completions", json=body, headers=headers) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                events += 1
                for choice in json.loads(line[6:]).get("choices") or []:
                    text.append((choice.get("delta") or {}).get("content") or "")
    return "".join(text), events


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the web process and its children (uvicorn's workers, if any)."""
    process = psutil.Process(pid)
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        times = each.cpu_times()
        total += times.user + times.system
    return total


async def round_(url: str, pid: int, given: dict, path: str, max_tokens: int) -> dict:
    ask = chat_path if path == "chat" else bare_proxy
    before = cpu_seconds(pid)
    answers = await asyncio.gather(
        *(ask(url, token, given["model"], max_tokens) for token in given["tokens"])
    )
    await asyncio.sleep(SETTLE_SECONDS)
    spent = cpu_seconds(pid) - before
    tokens = sum(len(text.split()) for text, _ in answers)
    return {
        "tokens": tokens,
        "events": sum(events for _, events in answers),
        "whole": all(len(text.split()) == max_tokens for text, _ in answers),
        "web_cpu_s": round(spent, 3),
        "web_cpu_ms_per_token": round(spent * 1000 / max(tokens, 1), 4),
    }


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = cli.add_subparsers(dest="command", required=True)
    made = commands.add_parser("users")
    made.add_argument("--url", required=True)
    made.add_argument("--count", type=int, required=True)
    measured = commands.add_parser("round")
    measured.add_argument("--url", required=True)
    measured.add_argument("--pid", type=int, required=True)
    measured.add_argument("--users", required=True, help="the JSON that `users` printed, in a file")
    measured.add_argument("--path", choices=("chat", "proxy"), required=True)
    measured.add_argument("--max-tokens", type=int, required=True)
    options = cli.parse_args()
    if options.command == "users":
        result = users(options.url, options.count)
    else:
        with open(options.users) as given:
            result = asyncio.run(
                round_(options.url, options.pid, json.load(given), options.path, options.max_tokens)
            )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
