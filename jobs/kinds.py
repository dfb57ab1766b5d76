"""Bulk jobs of other kinds than summaries: a room above jobs (batches/, the OpenAI Batch API)
registers here, when its app is ready, how a round's claimed documents are admitted, how one runs
and what follows when its job ends. Their jobs share everything else: the bulk queue and priority,
load shaping, claims and leases, attempts, progress and the admin."""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from inference.client import EngineClient
from jobs.claims import Claim
from jobs.summarize import Summary


class LineRefused(Exception):
    """A line that fails for good without an engine call (a spent quota, a refused model): its
    error-table code and sentence go to the line's error."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Runs one claimed document of the job, with what its admission made of it: its figures, and
# `body`, the response it answered with.
LineRun = Callable[[Claim, object], Awaitable[Summary]]


@dataclass(frozen=True)
class Kind:
    # Checks the lines one round claimed, in the database's thread, before any of them runs: from
    # the job's owner id and the claims, each line's document id to what its run is handed (its
    # checked request), or to the LineRefused that fails it without an engine call.
    admit: Callable[[int, list[Claim]], dict[int, object]]
    # The runner of one job's lines: made once per run, from the job's owner id and the engine.
    lines: Callable[[int, EngineClient], LineRun]
    # Called in the worker, once the job has ended (finished or cancelled), with the job's id.
    ended: Callable[[int], None]
    # The most lines one job of the kind keeps in flight while chat is quiet, read when its run
    # starts; None: BULK_CONCURRENCY.
    concurrency: Callable[[], int] | None = None


KINDS: dict[str, Kind] = {}
