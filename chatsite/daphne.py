"""The web process: daphne, on uvloop's event loop.

`python -m chatsite.daphne` takes daphne's own arguments. daphne builds its event loop when its
server module is first imported; uvloop's policy, set before that, makes it uvloop's. Every
token an answer relays wakes the loop several times (the engine's stream, Redis, the client's
socket), and uvloop's libuv loop spends less of the web process's CPU on each wake-up than
asyncio's own selector loop (docs/benchmarks.md, section 5). WEB_EVENT_LOOP=asyncio keeps
asyncio's loop.

Its server is daphne's with the answers' part in it (answers/): once running, it scans for answers
to take over, and SIGTERM drains it (answers.drain) instead of stopping it at once; a second
SIGTERM, or SIGINT, stops it at once. A request's body never sits in its memory whole (a 200 MiB
upload to /v1/files): twisted keeps it in a temporary file, but would parse a POSTed form into memory
for daphne, which never reads what it parsed (10 times a multipart body's size, measured), and daphne
hands the body to Django in 8 KiB messages all queued at once; here the form is left unparsed and the
messages go through a temporary file of their own (`SpooledBody`). Going out, daphne writes what it is
sent at once, however slowly the client reads: here a response waits while more than
`WRITE_BUFFER_BYTES` wait for the client (a streamed download reads no further ahead than that).
A WebSocket's scope carries a sender that writes text frames straight to its connection
(httpkit.websocket), for the chat's token frames.
"""

import asyncio
import gc
import os
import pprint
import signal
import sys
import tempfile
from functools import partial

from chatsite.env import env_choice, env_int


def use_event_loop() -> None:
    """Make the loops this process creates WEB_EVENT_LOOP's kind."""
    if env_choice("WEB_EVENT_LOOP", "uvloop", {"uvloop", "asyncio"}) == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def with_backlog(endpoint: str) -> str:
    """A TCP endpoint with WEB_LISTEN_BACKLOG connections waiting to be accepted. Twisted's default
    is 50: when every page reconnects at once (a web process restarted, a deploy), more arrive
    between two turns of a busy event loop, and the kernel drops the rest, which their clients see
    as resets (docs/benchmarks.md, "Capacity"). Linux caps it at net.core.somaxconn."""
    if not endpoint.startswith("tcp:") or ":backlog=" in endpoint:
        return endpoint
    backlog = env_int("WEB_LISTEN_BACKLOG", 4096, minimum=1)
    return f"{endpoint}:backlog={backlog}"


def listening_socket(argv: list[str]) -> list[str]:
    """daphne's arguments, made to accept from the listening socket at descriptor WEB_LISTEN_FD
    instead of binding --bind/--port, when that variable is set: several web processes then share
    the socket supervisord opened for them (deploy/supervisor.py) and keeps open across restarts."""
    fd = env_int("WEB_LISTEN_FD", -1, minimum=0) if os.environ.get("WEB_LISTEN_FD") else -1
    if fd < 0:
        return argv
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("-b", "--bind", "-p", "--port"):
            skip = True
        elif not arg.startswith(("--bind=", "--port=")):
            kept.append(arg)
    return [*kept[:1], "--fd", str(fd), *kept[1:]]


_SPOOLED = object()
# Bytes a response may have waiting for a slow client before its application's next send waits too.
WRITE_BUFFER_BYTES = 1024 * 1024


class SpooledBody(asyncio.Queue):
    """An application's input queue that keeps a request's body in a temporary file (in memory up to
    1 MiB): daphne puts every message of a body at once, before the application reads one, and the
    application gets the body back a chunk at a time. Other messages pass as they are."""

    CHUNK = 64 * 1024

    def __init__(self) -> None:
        super().__init__()
        self._body: tempfile.SpooledTemporaryFile | None = None
        self._size = 0
        self._reading = False

    def put_nowait(self, message: dict) -> None:
        spooling = self._body is not None and not self._reading
        if message.get("type") != "http.request" or not (spooling or message.get("more_body")):
            super().put_nowait(message)
            return
        if self._body is None:
            self._body = tempfile.SpooledTemporaryFile(max_size=1024 * 1024)
            super().put_nowait(_SPOOLED)
        self._body.write(message.get("body", b""))
        self._size += len(message.get("body", b""))

    async def get(self) -> dict:
        if not self._reading:
            message = await super().get()
            if message is not _SPOOLED:
                return message
            self._reading = True
            self._body.seek(0)
        chunk = self._body.read(self.CHUNK)
        more = self._body.tell() < self._size
        if not more:  # the body is read: what comes next (http.disconnect) comes from the queue
            self._body.close()
            self._body, self._size, self._reading = None, 0, False
        return {"type": "http.request", "body": chunk, "more_body": more}


class Formatted:
    """`pprint.pformat(value)` made when a log line is formatted with it, not before."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return pprint.pformat(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def server_class():
    """daphne's Server, draining on SIGTERM and taking over answers while it serves, its requests'
    bodies kept out of memory."""
    import autobahn.websocket.protocol
    import daphne.server
    from daphne.http_protocol import HTTPFactory, WebRequest
    from daphne.server import Server, reactor

    from httpkit.websocket import EXTENSION, DirectSocket, waiting_bytes

    class UnparsedFormsFactory(HTTPFactory):
        def buildProtocol(self, addr):
            protocol = super().buildProtocol(addr)
            protocol.requestFactory = partial(WebRequest, parsePOSTFormSubmission=False)
            return protocol

    # daphne's Server.run makes its factory by this name.
    daphne.server.HTTPFactory = UnparsedFormsFactory
    # autobahn pretty-prints every new socket's options for a debug line, logged or not (1 % of the
    # web process's samples where each answer opens its socket): formatted only if it is logged.
    autobahn.websocket.protocol.pformat = Formatted

    class AnswersServer(Server):
        def run(self) -> None:
            self.ports = []
            self.draining = None
            self.endpoints = [with_backlog(endpoint) for endpoint in self.endpoints]
            reactor.callWhenRunning(self.serve_answers)
            super().run()

        def create_application(self, protocol, scope):
            """daphne's, with a SpooledBody for the application's input queue, and a socket's
            DirectSocket in its scope's extensions (httpkit.websocket)."""
            assert "application_instance" not in self.connections[protocol]
            input_queue = SpooledBody()
            scope.setdefault("asgi", {"version": "3.0"})
            if scope.get("type") == "websocket":
                scope["extensions"] = {**(scope.get("extensions") or {}), EXTENSION: DirectSocket(protocol)}
            instance = self.application(
                scope=scope, receive=input_queue.get, send=partial(self.handle_reply, protocol)
            )
            if protocol not in self.connections:
                return None
            self.connections[protocol]["application_instance"] = asyncio.ensure_future(
                instance, loop=asyncio.get_event_loop()
            )
            return input_queue

        async def handle_reply(self, protocol, message) -> None:
            """daphne's, a response's body waiting while its client has more than WRITE_BUFFER_BYTES
            to read."""
            await super().handle_reply(protocol, message)
            if message.get("type") != "http.response.body":
                return  # sockets' frames are the chat's, bounded by its own limits
            transport = getattr(protocol, "transport", None)
            # Twisted's transport tells nothing when its buffer drains: it is read again shortly.
            while (  # noqa: ASYNC110
                transport is not None
                and not getattr(transport, "disconnected", True)
                and waiting_bytes(transport) > WRITE_BUFFER_BYTES
            ):
                await asyncio.sleep(0.005)

        def listen_success(self, port) -> None:
            self.ports.append(port)
            super().listen_success(port)

        def serve_answers(self) -> None:
            from answers.takeover import keep_scanning
            from inference.engine import engine_client

            # What start-up made (Django, its apps, the modules) lives as long as the process: out
            # of the collector's way, so its full collections walk only what serving makes.
            gc.freeze()
            loop = asyncio.get_event_loop()
            self.scanning_stopped = asyncio.Event()
            self.scanning = loop.create_task(keep_scanning(engine_client(), self.scanning_stopped))
            signal.signal(signal.SIGTERM, lambda *_: loop.call_soon_threadsafe(self.drain))

        def drain(self) -> None:
            from django.conf import settings

            if self.draining is not None:  # asked again: stop now
                self.stop()
                return
            for port in self.ports:
                port.stopListening()
            self.scanning_stopped.set()
            self.draining = asyncio.get_event_loop().create_task(self.drain_all(settings))
            self.draining.add_done_callback(lambda _: self.stop())

        async def drain_all(self, settings) -> None:
            """The answers drain (answers.drain) while the sockets are sent away (chat.sockets)."""
            from answers.drain import drain
            from chat import sockets

            answers = asyncio.ensure_future(drain(settings.WEB_DRAIN_SECONDS))
            try:
                await sockets.held().send_away(
                    settings.WEB_DRAIN_SOCKETS_PER_SECOND, settings.WEB_DRAIN_SECONDS, answers
                )
            finally:
                await answers

    return AnswersServer


def main() -> None:
    # Read by the settings (PROCESS_ROLE): this process reuses its database connections.
    os.environ["CHATSITE_PROCESS"] = "web"
    use_event_loop()
    from daphne.cli import CommandLineInterface

    CommandLineInterface.server_class = server_class()
    sys.argv = listening_socket(sys.argv)
    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
