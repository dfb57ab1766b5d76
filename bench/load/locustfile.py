"""The user model of `make loadtest`: people on the chat page's socket, people on its SSE fallback,
and programs on `/v1/chat/completions` (docs/benchmarks.md, "Capacity: users on one box").

Run by `bench.load.run`, which starts the product, makes the users' sessions and keys up front (the
login throttle is not what is measured) and hands them over in the plan file `LOAD_PLAN`; every answer
that ends is appended to `LOAD_ANSWERS` for the end-of-run check against the store. The model's
parameters come from the environment (`bench.load.model`). No Django here: locust's gevent runs it."""

import itertools
import json
import os
import random
import time

import gevent
import gevent.event
import gevent.queue
import websocket
from locust import HttpUser, User, between, events, task
from locust.exception import StopUser

# Locust puts this folder on sys.path: the model comes alone, without the `bench` package (Django's side).
from model import Model
from requests.adapters import HTTPAdapter
from urllib3.exceptions import ProtocolError
from urllib3.util.retry import Retry

MODEL = Model.from_environment()
PLAN = json.loads(open(os.environ["LOAD_PLAN"]).read()) if "LOAD_PLAN" in os.environ else {}
_ANSWERS = open(os.environ.get("LOAD_ANSWERS", os.devnull), "a", buffering=1)  # noqa: SIM115
_TAKEN = {kind: itertools.count() for kind in ("ws", "sse", "api")}


# With `--processes N` (LOAD_PROCESSES), each of locust's worker processes takes every Nth user made
# up front, from its own index on, so no two workers hand out the same user.
PROCESSES = int(os.environ.get("LOAD_PROCESSES", "1"))
_ENVIRONMENT = []


@events.init.add_listener
def _keep_environment(environment, **_) -> None:
    _ENVIRONMENT.append(environment)


def identity(kind: str):
    """The next user of `kind` made up front; users beyond them share (their limits then bind sooner)."""
    pool = PLAN[kind]
    worker = getattr(_ENVIRONMENT[0].runner, "worker_index", 0) if _ENVIRONMENT else 0
    return pool[(next(_TAKEN[kind]) * PROCESSES + max(worker, 0)) % len(pool)]


def record(**fields) -> None:
    _ANSWERS.write(json.dumps(fields) + "\n")


def report(surface: str, name: str, milliseconds: float, error: str | None = None) -> None:
    events.request.fire(
        request_type=surface,
        name=name,
        response_time=milliseconds,
        response_length=0,
        exception=RuntimeError(error) if error else None,
        context={},
    )


class Timing:
    """One answer's time to first token, gaps between token frames and total, as its client saw them."""

    def __init__(self, surface: str) -> None:
        self.surface = surface
        self.started = time.perf_counter()
        self.previous: float | None = None

    def token(self) -> None:
        now = time.perf_counter()
        if self.previous is None:
            report(self.surface, "ttft", (now - self.started) * 1000)
        else:
            report(self.surface, "gap", (now - self.previous) * 1000)
        self.previous = now

    def gap_broken(self) -> None:
        """A reload: the wait for the reconnection is not a gap between tokens."""
        if self.previous is not None:
            self.previous = time.perf_counter()

    def done(self) -> None:
        report(self.surface, "total", (time.perf_counter() - self.started) * 1000)


def refused(surface: str, code: str, retry_after, *, wait: bool = True) -> None:
    """`busy` is the product's answer past the knee: counted, not a failure, when it says when to try
    again (`retry_after`); the user waits as told (unless `wait` is False: a refused stop leaves the
    answer running, and its stream is read on)."""
    if retry_after is None:
        report(surface, f"refused {code}", 0, "no retry_after")
        record(surface=surface.lower(), error=f"{code}_without_retry_after")
        retry_after = 1
    else:
        report(surface, f"refused {code}", 0)
    if wait:
        gevent.sleep(min(float(retry_after or 1), MODEL.think_max))


class DroppedConnection(Retry):
    """Send a request again, once, when its kept-alive connection was closed by the server before any
    response came (the server closes connections idle for a minute; a user thinking 30-120 s reuses
    one just as it closes): what browsers and the openai SDK do. A read that timed out is not sent
    again: that is a stall, which the run must see."""

    def _is_read_error(self, err: Exception) -> bool:
        return isinstance(err, ProtocolError)


def http_client(user: HttpUser) -> None:
    adapter = HTTPAdapter(
        # Statuses are the user's to read (a 429's Retry-After above all), never retried here.
        max_retries=DroppedConnection(
            total=1,
            connect=1,
            read=1,
            status=0,
            other=0,  # a read timeout falls here: a stall, which the run must see
            allowed_methods=None,
            respect_retry_after_header=False,
        )
    )
    user.client.mount("http://", adapter)


def fetch(user: HttpUser, surface: str, path: str, **kwargs):
    """GET `path` as a page load does: a `busy` (429 with Retry-After: the web process is at its bound
    on requests waiting) is waited out as told and tried again; the response once served, or None
    when it failed (counted, and recorded for the check)."""
    while True:
        with user.client.get(path, name=path, catch_response=True, **kwargs) as response:
            if response.status_code == 429:
                response.success()
                refused(surface, "busy", response.headers.get("Retry-After"))
                continue
            if not response.ok:
                response.failure(f"HTTP {response.status_code}")
                record(surface=surface.lower(), error=f"http_{response.status_code}", path=path)
                return None
            return response


# The chat page's reconnection backoff (static/frontend/connection.js), in seconds.
RETRY_BASE = 0.5
RETRY_CAP = 10.0


def refused_socket(frame: dict) -> bool:
    """Whether `frame` is the web process's refusal of a handshake (reason `web_pending`): the socket
    closes with 4429 after it."""
    return frame.get("type") == "chat.error" and frame.get("reason") == "web_pending"


def arrive() -> None:
    """A user who has just opened the page asks a first question after a wait drawn between 0 and
    the longest think time: a step's users, arriving at the spawn rate, then ask as users already
    thinking at random would, not all at once as they arrive."""
    gevent.sleep(random.uniform(0, MODEL.think_max))


def prompt() -> str:
    return f"Question {random.randrange(10**6)}: {random.choice(MODEL.prompts)}"


class ChatSocketUser(User):
    """A person on the chat page: one socket held open, a turn now and then."""

    weight = MODEL.weights["ws"]
    wait_time = between(MODEL.think_min, MODEL.think_max)

    def on_start(self) -> None:
        self.me = identity("ws")
        self.conversation = None
        self.ws = None
        self.following = False
        # Set while the socket is open: what the user sends while it opens again waits, as the
        # page's outbox keeps it.
        self.opened = gevent.event.Event()
        self.connect()
        arrive()

    def on_stop(self) -> None:
        self.close()

    def connect(self, name: str = "connect", *, as_the_page: bool = False) -> list:
        """Open the page's socket; a reader greenlet answers pings and queues the frames. A web
        process at its bound on handshakes accepts, sends its `busy` frame at once and closes (4429):
        the page waits `retry_after` and opens again with the slot's ticket, as this does. With
        `as_the_page` (a socket that was lost), a handshake that fails is tried again too, after the
        page's backoff (from RETRY_BASE up to RETRY_CAP, full jitter) instead of failing the user.
        The tries refused, each as [its time (epoch seconds), the retry_after it was told], or for a
        handshake that failed [its time, None, the error]."""
        url = self.host.replace("http", "ws", 1) + "/ws/chat/"
        started = time.perf_counter()  # what the user waits: refusals and their waits included
        refusals, bound, slot = [], RETRY_BASE, None
        while True:
            target, slot = url + (f"?slot={slot}" if slot else ""), None
            try:
                ws = websocket.create_connection(
                    target, origin=self.host, cookie=f"sessionid={self.me}", timeout=MODEL.answer_timeout
                )
            except Exception as exc:
                if not as_the_page:
                    report("WS", name, (time.perf_counter() - started) * 1000, repr(exc))
                    record(surface="ws", error="connect", detail=repr(exc))
                    raise
                refusals.append([time.time(), None, repr(exc)[:120]])
                report("WS", f"refused {name}", 0)
                gevent.sleep(random.uniform(0, bound))
                bound = min(bound * 2, RETRY_CAP)
                continue
            opened = (time.perf_counter() - started) * 1000
            frame = self._refusal(ws)
            if frame is None:
                break
            ws.close()
            slot = frame.get("slot")  # the page brings its slot's ticket back
            refusals.append([time.time(), frame.get("retry_after")])
            refused("WS", "busy", frame.get("retry_after"))
        report("WS", name, opened)
        self.ws = ws
        self.opened.set()
        self.frames: gevent.queue.Queue = gevent.queue.Queue()
        self.reader = gevent.spawn(self._read, self.ws, self.frames)
        return refusals

    def reconnect(self) -> None:
        """What the page does when its socket is lost while nobody reads an answer (a web process
        restarted): open again after a wait drawn below RETRY_BASE; each try refused is counted
        for this socket (bench.load.check)."""
        gevent.sleep(random.uniform(0, RETRY_BASE))
        lost = time.time()
        tries = self.connect("reconnect", as_the_page=True)
        record(surface="ws", reconnect=len(tries), lost=lost, opened=time.time(), tries=tries)

    @staticmethod
    def _refusal(ws) -> dict | None:
        """The refusal frame, which the web process sends with the handshake's answer; None when
        nothing came within a moment (an accepted socket sends nothing until asked)."""
        ws.settimeout(0.25)
        try:
            frame = json.loads(ws.recv())
        except websocket.WebSocketTimeoutException:
            return None
        finally:
            ws.settimeout(MODEL.answer_timeout)
        if refused_socket(frame):
            return frame
        raise RuntimeError(f"unexpected first frame {frame!r}")

    def _read(self, ws, frames) -> None:
        try:
            while True:
                frames.put(json.loads(ws.recv()))
        except Exception as exc:
            frames.put({"type": "_closed", "detail": repr(exc)})
            if ws is self.ws and not self.following:  # lost, not closed by the user
                self.opened.clear()
                self.reconnect()

    def close(self) -> None:
        if self.ws is not None:
            ws, self.ws = self.ws, None
            ws.close()
            self.reader.join(timeout=5)

    def send(self, frame: dict) -> None:
        self.opened.wait(MODEL.answer_timeout)
        self.ws.send(json.dumps(frame))

    @task
    def turn(self) -> None:
        self.following = True
        try:
            if self.conversation is not None and random.random() < MODEL.p_new_conversation:
                self.conversation = None
            self.send({"type": "chat.send", "conversation": self.conversation, "content": prompt()})
            answer = self.follow()
            if answer is not None and random.random() < MODEL.p_regenerate:
                self.send({"type": "chat.regenerate", "message": answer})
                self.follow()
        finally:
            self.following = False

    def follow(self) -> int | None:
        """Read one answer to its end, stopping or reloading it on the way as the model says;
        its id when it ended, None when it was refused or failed."""
        timing = Timing("WS")
        stop_at = random.randint(1, 8) if random.random() < MODEL.p_stop else None
        reload_at = random.randint(1, 8) if random.random() < MODEL.p_reload else None
        message, seq, parts = None, -1, []
        while True:
            try:
                frame = self.frames.get(timeout=MODEL.answer_timeout)
            except gevent.queue.Empty:
                report("WS", "answer", MODEL.answer_timeout * 1000, "stalled")
                record(surface="ws", error="stalled", message=message)
                self.close()
                self.connect()
                return None
            kind = frame["type"]
            if kind == "_closed":
                record(surface="ws", error="socket_closed", detail=frame["detail"], message=message)
                report("WS", "answer", 0, "socket closed")
                self.connect()
                if message is None:
                    return None
                self.send({"type": "chat.resume", "message": message, "after": seq})
                continue
            if frame.get("message") not in (None, message) and kind != "chat.started":
                continue  # a late frame of an earlier answer (a stop that raced its end)
            if kind == "chat.started":
                message, self.conversation = frame["message"], frame["conversation"]
            elif kind == "chat.token":
                if frame["seq"] != seq + 1:
                    record(surface="ws", error="seq_gap", message=message, expected=seq + 1, got=frame["seq"])
                seq = frame["seq"]
                parts.append(frame["text"])
                timing.token()
                if stop_at is not None and len(parts) == stop_at:
                    self.send({"type": "chat.stop", "message": message})
                    stop_at = None
                if reload_at is not None and len(parts) == reload_at:
                    reload_at = None
                    self.reload(message, seq)
                    timing.gap_broken()
            elif kind == "chat.done":
                timing.done()
                record(surface="ws", message=message, status=frame["status"], text="".join(parts))
                return message
            elif refused_socket(frame):  # a refusal later than _refusal waited for: the socket closes
                refused("WS", "busy", frame.get("retry_after"))
                self.close()
                self.connect()
                return None
            elif kind == "chat.error":
                if frame["code"] == "not_running":
                    continue  # the stop reached an answer that had just ended
                if frame["code"] == "busy":
                    refused("WS", "busy", frame.get("retry_after"))
                    return None
                report("WS", "answer", 0, frame["code"])
                record(surface="ws", error=frame["code"], detail=frame.get("detail"), message=message)
                return None

    def reload(self, message: int, seq: int) -> None:
        """What a reload mid-answer does: the page again, a new socket, and resume after the last token."""
        self.close()
        self.connect("reload")
        self.send({"type": "chat.resume", "message": message, "after": seq})


def sse_events(response):
    """(id, data) of each Server-Sent Event of a streamed response."""
    event_id, data = None, []
    for line in response.iter_lines(decode_unicode=True):
        if line == "":
            if data:
                yield event_id, "\n".join(data)
            event_id, data = None, []
        elif line.startswith("id:"):
            event_id = int(line[3:].strip())
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


class ChatFallbackUser(HttpUser):
    """A person whose proxy blocks WebSockets: the chat page's SSE fallback, by session and CSRF token."""

    weight = MODEL.weights["sse"]
    wait_time = between(MODEL.think_min, MODEL.think_max)

    def on_start(self) -> None:
        http_client(self)
        self.client.cookies.set("sessionid", identity("sse"))
        fetch(self, "SSE", "/", headers={"Accept": "text/html"})
        arrive()
        self.headers = {
            "X-CSRFToken": self.client.cookies.get("csrftoken", ""),
            "Referer": self.host + "/",
            "Origin": self.host,
        }
        self.conversation = None

    @task
    def turn(self) -> None:
        if self.conversation is not None and random.random() < MODEL.p_new_conversation:
            self.conversation = None
        answer = self.stream({"prompt": prompt(), "conversation": self.conversation})
        if answer is not None and random.random() < MODEL.p_regenerate:
            self.stream({"regenerate": answer})

    def stream(self, body: dict) -> int | None:
        timing = Timing("SSE")
        stop_at = random.randint(1, 8) if random.random() < MODEL.p_stop else None
        reload_at = random.randint(1, 8) if random.random() < MODEL.p_reload else None
        state = {"message": None, "seq": -1, "parts": []}
        response = self.client.post(
            "/chat/stream",
            json=body,
            headers=self.headers,
            stream=True,
            name="/chat/stream",
            timeout=MODEL.answer_timeout,
            catch_response=True,
        )
        with response:
            if response.status_code != 200:
                return self.failed(response)
            response.success()
            ended = self.read(response, state, timing, stop_at, reload_at)
        while ended == "reload":
            timing.gap_broken()
            with self.client.get(
                f"/chat/stream?message={state['message']}",
                headers={"Last-Event-ID": str(state["seq"])},
                stream=True,
                name="/chat/stream (resume)",
                timeout=MODEL.answer_timeout,
                catch_response=True,
            ) as response:
                if response.status_code != 200:
                    return self.failed(response)
                response.success()
                ended = self.read(response, state, timing, None, None)
        if ended == "done":
            return state["message"]
        return None

    def read(self, response, state, timing, stop_at, reload_at) -> str:
        for event_id, data in sse_events(response):
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("started"):
                state["message"], self.conversation = event["message"], event["conversation"]
            elif "token" in event:
                if event_id != state["seq"] + 1:
                    record(surface="sse", error="seq_gap", message=state["message"], got=event_id)
                state["seq"] = event_id
                state["parts"].append(event["token"])
                timing.token()
                if stop_at is not None and len(state["parts"]) == stop_at:
                    self.stop_answer(state["message"])
                    stop_at = None
                if reload_at is not None and len(state["parts"]) == reload_at:
                    return "reload"
            elif event.get("done"):
                timing.done()
                record(
                    surface="sse",
                    message=state["message"],
                    status=event["status"],
                    text="".join(state["parts"]),
                )
                return "done"
            elif "error" in event:
                report("SSE", "answer", 0, event["error"]["code"])
                record(surface="sse", error=event["error"]["code"], message=state["message"])
                return "error"
        record(surface="sse", error="stream_ended_without_done", message=state["message"])
        report("SSE", "answer", 0, "stream ended without done")
        return "error"

    def stop_answer(self, message: int) -> None:
        """Stop the answer, as the page's stop button does; a `busy` refusal leaves it running."""
        body = {"message": message}
        with self.client.post(
            "/chat/stop", json=body, headers=self.headers, name="/chat/stop", catch_response=True
        ) as response:
            if response.status_code == 429:
                response.success()
                refused("SSE", "busy", response.headers.get("Retry-After"), wait=False)

    def failed(self, response) -> None:
        try:
            code = response.json()["error"]["code"]
        except ValueError:
            code = f"http_{response.status_code}"
        if code == "busy":
            response.success()
            refused("SSE", "busy", response.headers.get("Retry-After"))
            return None
        response.failure(code)
        record(surface="sse", error=code, status=response.status_code, detail=repr(response.error))
        return None


class ApiProgram(HttpUser):
    """A program on the OpenAI-compatible API with its key: streamed completions, stored (`store`)."""

    weight = MODEL.weights["api"]
    wait_time = between(MODEL.think_min, MODEL.think_max)

    def on_start(self) -> None:
        http_client(self)
        self.me = identity("api")
        self.headers = {"Authorization": f"Bearer {self.me['key']}"}
        models = fetch(self, "API", "/v1/models", headers=self.headers)
        if models is None:  # failed, and recorded: this program stops
            raise StopUser
        self.model = models.json()["data"][0]["id"]
        self.history: list[dict] = []
        arrive()

    @task
    def completion(self) -> None:
        if random.random() < MODEL.p_new_conversation:
            self.history = []
        self.history.append({"role": "user", "content": prompt()})
        body = {"model": self.model, "messages": self.history, "stream": True, "store": True}
        timing = Timing("API")
        parts = []
        with self.client.post(
            "/v1/chat/completions",
            json=body,
            headers=self.headers,
            stream=True,
            catch_response=True,
            name="/v1/chat/completions",
            timeout=MODEL.answer_timeout,
        ) as response:
            if response.status_code != 200:
                try:
                    code = response.json().get("error", {}).get("code")
                except ValueError:  # no body (the connection failed), or not JSON
                    code = None
                if code == "busy":
                    response.success()
                    self.history.pop()
                    return refused("API", "busy", response.headers.get("Retry-After"))
                response.failure(code or response.status_code)
                error = str(code or response.status_code)
                record(surface="api", error=error, user=self.me["username"], detail=repr(response.error))
                self.history.pop()
                return None
            for _, data in sse_events(response):
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    response.failure(chunk["error"].get("code"))
                    record(surface="api", error=chunk["error"].get("code"), user=self.me["username"])
                    self.history.pop()
                    return None
                for choice in chunk.get("choices", []):
                    if choice.get("delta", {}).get("content"):
                        parts.append(choice["delta"]["content"])
                        timing.token()
        timing.done()
        text = "".join(parts)
        record(surface="api", user=self.me["username"], status="complete", text=text)
        self.history.append({"role": "assistant", "content": text})
