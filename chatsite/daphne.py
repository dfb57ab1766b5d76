"""The web process: daphne, on uvloop's event loop.

`python -m chatsite.daphne` takes daphne's own arguments. daphne builds its event loop when its
server module is first imported; uvloop's policy, set before that, makes it uvloop's. Every
token an answer relays wakes the loop several times (the engine's stream, Redis, the client's
socket), and uvloop's libuv loop spends less of the web process's CPU on each wake-up than
asyncio's own selector loop (docs/benchmarks.md, section 5). WEB_EVENT_LOOP=asyncio keeps
asyncio's loop.

Its server is daphne's with the answers' part in it (answers/): once running, it scans for answers
to take over, and SIGTERM drains it (answers.drain) instead of stopping it at once; a second
SIGTERM, or SIGINT, stops it at once.
"""

import asyncio
import os
import signal
import sys

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


def server_class():
    """daphne's Server, draining on SIGTERM and taking over answers while it serves."""
    from daphne.server import Server, reactor

    class AnswersServer(Server):
        def run(self) -> None:
            self.ports = []
            self.draining = None
            self.endpoints = [with_backlog(endpoint) for endpoint in self.endpoints]
            reactor.callWhenRunning(self.serve_answers)
            super().run()

        def listen_success(self, port) -> None:
            self.ports.append(port)
            super().listen_success(port)

        def serve_answers(self) -> None:
            from answers.takeover import keep_scanning
            from inference.engine import engine_client

            loop = asyncio.get_event_loop()
            self.scanning_stopped = asyncio.Event()
            self.scanning = loop.create_task(keep_scanning(engine_client(), self.scanning_stopped))
            signal.signal(signal.SIGTERM, lambda *_: loop.call_soon_threadsafe(self.drain))

        def drain(self) -> None:
            from django.conf import settings

            from answers.drain import drain

            if self.draining is not None:  # asked again: stop now
                self.stop()
                return
            for port in self.ports:
                port.stopListening()
            self.scanning_stopped.set()
            self.draining = asyncio.get_event_loop().create_task(drain(settings.WEB_DRAIN_SECONDS))
            self.draining.add_done_callback(lambda _: self.stop())

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
