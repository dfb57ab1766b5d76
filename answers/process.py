"""This process's own part in the answers: the answers it runs, and whether it drains. A leaf that
every other module of the room reads, so none of them imports another to learn it."""

from typing import Any

# The answers this process runs (answers.run.AnswerRun), by their registry name (answers.ownership):
# a stop from the same process is a direct call, a drain waits for them, a scan never claims them.
RUNNING: dict[int | str, Any] = {}

_draining = False


def draining() -> bool:
    """True once this process has begun to drain: it takes no new answer or socket."""
    return _draining


def begin_draining() -> None:
    global _draining
    _draining = True
