"""The embedding server's own batching: requests wait in a bounded queue, ordered by priority, and
one thread runs the model on at most `max_batch` of their texts at a time.

A pass takes texts of the most urgent waiting priority only (lower runs first, as vLLM's
`priority`), from requests in the order they came: a query that arrives while an ingestion batch
of thousands of texts is being embedded waits for the pass under way, never for the batch. Within
a request the texts go longest first, so each pass pads its texts to similar lengths. Each lane
(queries, bulk) holds at most `max_queue` texts not yet embedded; past it a request is refused
whole, and ingestion filling the bulk lane never refuses a query.
"""

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

QUERY, BULK = "query", "bulk"


class QueueFull(Exception):
    pass


@dataclass(eq=False)
class Work:
    """One request's texts, and what they became so far. `finish(work, error)` is called once,
    from the model's thread, when every text is embedded or the request failed."""

    texts: Sequence[str]
    priority: int
    finish: Callable[["Work", BaseException | None], None]
    lane: str = BULK
    vectors: list[Any] = field(default_factory=list)
    tokens: int = 0
    arrived: float = field(default_factory=time.monotonic)
    started: float | None = None
    cancelled: bool = False

    def __post_init__(self) -> None:
        self.vectors = [None] * len(self.texts)
        self._order = sorted(range(len(self.texts)), key=lambda i: -len(self.texts[i]))
        self._taken = 0
        # Texts not yet embedded (taken or not).
        self.left = len(self.texts)

    def take(self, room: int) -> list[int]:
        indices = self._order[self._taken : self._taken + room]
        self._taken += len(indices)
        return indices

    @property
    def untaken(self) -> int:
        return len(self.texts) - self._taken


# What the model makes of texts: one vector each, and the tokens each was read as.
Encode = Callable[[list[str]], tuple[Sequence[Any], Sequence[int]]]


class Batcher:
    """Runs `encode` on one thread of its own, over the waiting requests' texts (the module's
    docstring says in which order). `on_pass(lane, texts, tokens, seconds)` hears of each pass."""

    def __init__(
        self,
        encode: Encode,
        *,
        max_batch: int,
        max_queue: int,
        on_pass: Callable[[str, int, int, float], None] = lambda lane, texts, tokens, seconds: None,
    ) -> None:
        self._encode = encode
        self.max_batch = max_batch
        self.max_queue = max_queue
        self._on_pass = on_pass
        self._ready = threading.Condition()
        self._waiting: list[tuple[int, int, Work]] = []
        self._sequence = itertools.count()
        self._held = {QUERY: 0, BULK: 0}
        self._thread = threading.Thread(target=self._run, name="embedding-passes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def held(self, lane: str) -> int:
        """Texts of `lane` not yet embedded."""
        return self._held[lane]

    def submit(self, work: Work) -> None:
        """Queue `work`, or raise QueueFull when its lane cannot hold its texts."""
        with self._ready:
            if self._held[work.lane] + len(work.texts) > self.max_queue:
                raise QueueFull(
                    f"{self._held[work.lane]} texts of this kind are waiting; "
                    f"{len(work.texts)} more would pass the bound of {self.max_queue}"
                )
            self._held[work.lane] += len(work.texts)
            bisect.insort(self._waiting, (work.priority, next(self._sequence), work), key=lambda e: e[:2])
            self._ready.notify()

    def cancel(self, work: Work) -> None:
        """Embed no more of `work`'s texts (its client went away)."""
        with self._ready:
            work.cancelled = True

    def _next_pass(self) -> list[tuple[Work, list[int]]]:
        """The next pass's texts: of the most urgent priority waiting, oldest request first."""
        with self._ready:
            while True:
                self._drop_cancelled()
                if self._waiting:
                    break
                self._ready.wait()
            priority = self._waiting[0][0]
            chosen, room = [], self.max_batch
            for entry_priority, _, work in self._waiting:
                if entry_priority != priority or room == 0:
                    break
                indices = work.take(room)
                room -= len(indices)
                chosen.append((work, indices))
            self._waiting = [entry for entry in self._waiting if entry[2].untaken]
            return chosen

    def _drop_cancelled(self) -> None:
        for entry in [entry for entry in self._waiting if entry[2].cancelled]:
            self._waiting.remove(entry)
            self._held[entry[2].lane] -= entry[2].untaken

    def _run(self) -> None:
        while True:
            chosen = self._next_pass()
            texts = [work.texts[i] for work, indices in chosen for i in indices]
            started = time.monotonic()
            for work, _ in chosen:
                work.started = work.started or started
            try:
                vectors, tokens = self._encode(texts)
            except Exception as exc:  # the model failed these requests; the others go on
                self._fail(chosen, exc)
                continue
            self._on_pass(chosen[0][0].lane, len(texts), sum(tokens), time.monotonic() - started)
            position = 0
            for work, indices in chosen:
                for index in indices:
                    work.vectors[index] = vectors[position]
                    work.tokens += tokens[position]
                    position += 1
                self._done_with(work, len(indices), None)

    def _fail(self, chosen: list[tuple[Work, list[int]]], error: BaseException) -> None:
        for work, indices in chosen:
            with self._ready:
                # Its texts not yet taken are given up too.
                work.cancelled = True
                self._drop_cancelled()
            self._done_with(work, len(indices), error)

    def _done_with(self, work: Work, count: int, error: BaseException | None) -> None:
        with self._ready:
            self._held[work.lane] -= count
            work.left -= count
            finished = error is not None or (work.left == 0 and not work.cancelled)
        if finished:
            work.finish(work, error)
