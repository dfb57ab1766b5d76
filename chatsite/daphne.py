"""The web process: daphne, on uvloop's event loop.

`python -m chatsite.daphne` takes daphne's own arguments. daphne builds its event loop when its
server module is first imported; uvloop's policy, set before that, makes it uvloop's. Every
token an answer relays wakes the loop several times (the engine's stream, Redis, the client's
socket), and uvloop's libuv loop spends less of the web process's CPU on each wake-up than
asyncio's own selector loop (docs/benchmarks.md, section 5). WEB_EVENT_LOOP=asyncio keeps
asyncio's loop.
"""

import asyncio

from chatsite.env import env_choice


def use_event_loop() -> None:
    """Make the loops this process creates WEB_EVENT_LOOP's kind."""
    if env_choice("WEB_EVENT_LOOP", "uvloop", {"uvloop", "asyncio"}) == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main() -> None:
    use_event_loop()
    from daphne.cli import CommandLineInterface

    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
