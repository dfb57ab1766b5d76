"""An answer's Prometheus metrics, whichever surface asked for it (chat socket, SSE, API), and the
functions that move them.

Call sites (the answer run, admission control, the outcome of a failure) call the small functions
below and never touch a metric object, so names and buckets live in one place. answers.apps loads
this module at start, so /metrics (monitoring) shows them before any answer ran (docs/monitoring.md).
"""

from bisect import bisect_left

from prometheus_client import Counter, Gauge, Histogram

# Seconds. Dense below one second, where chat latency lives on any host.
TTFT_BUCKETS = (0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 60)
GAP_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5)
RATE_BUCKETS = (1, 2, 5, 10, 15, 20, 30, 40, 60, 80, 120, 200, 400)

TIME_TO_FIRST_TOKEN = Histogram(
    "chat_time_to_first_token_seconds",
    "From the start of an answer to its first token arriving from the engine, as the web tier sees it.",
    buckets=TTFT_BUCKETS,
)
TIME_BETWEEN_TOKENS = Histogram(
    "chat_time_between_tokens_seconds",
    "Gap between two consecutive streamed tokens of one answer, as the web tier sees it.",
    buckets=GAP_BUCKETS,
)
STREAMED_TOKENS = Counter(
    "chat_streamed_tokens_total",
    "Text deltas streamed to browsers: a token each, or several that came together (speculative decoding, "
    "or an engine ahead of the web tier); its rate is the web tier's tokens/s, at least.",
)
GENERATION_TOKENS_PER_SECOND = Histogram(
    "chat_generation_tokens_per_second",
    "Decode speed of one finished answer: completion tokens over the time after the first token.",
    buckets=RATE_BUCKETS,
)
COMPLETION_TOKENS = Counter("chat_completion_tokens_total", "Completion tokens the engine reported.")
GENERATIONS = Counter("chat_generations_total", "Answers that ended, by final status.", ["status"])
GENERATION_DURATION = Histogram(
    "chat_generation_duration_seconds",
    "Whole answer, start to end.",
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300),
)
ACTIVE_GENERATIONS = Gauge(
    "chat_active_generations", "Answers streaming right now.", multiprocess_mode="livesum"
)
ADMISSIONS_REFUSED = Counter(
    "chat_admissions_refused_total", "Chat requests refused by admission control, by reason.", ["reason"]
)
ENGINE_ERRORS = Counter("chat_engine_errors_total", "Failed engine calls, by error code.", ["code"])
ENGINE_WAITS = Counter(
    "chat_engine_waits_total",
    "Times an answer lost its engine mid-answer and waited to carry on with one that answers again.",
)

EVENT_LOOP_LAG = Gauge(
    "web_event_loop_lag_seconds",
    "How late the web process's event loop runs a timer, smoothed; sampled while answers run.",
    multiprocess_mode="livemax",
)
FRAMES_PACED = Counter(
    "chat_frames_paced_total",
    "Frames held back while the web process was busy, so the next carried the tokens made meanwhile.",
)
BUSY_STREAM_INTERVAL = Counter(
    "chat_busy_stream_interval_total",
    "Answers that started while the web process was busy and asked the engine for several tokens an event.",
)


def generation_started() -> None:
    """An answer began streaming; pair with generation_ended() in a `finally`."""
    ACTIVE_GENERATIONS.inc()


def generation_ended() -> None:
    ACTIVE_GENERATIONS.dec()


def engine_lost() -> None:
    """An answer lost its engine and waits for one (answers.run)."""
    ENGINE_WAITS.inc()


def loop_lag(seconds: float) -> None:
    EVENT_LOOP_LAG.set(seconds)


def frame_paced() -> None:
    FRAMES_PACED.inc()


def stream_interval_asked() -> None:
    BUSY_STREAM_INTERVAL.inc()


def first_token(seconds: float) -> None:
    TIME_TO_FIRST_TOKEN.observe(seconds)
    STREAMED_TOKENS.inc()


# The histogram's bounds, +Inf last, as prometheus_client keeps them.
_GAP_BOUNDS = TIME_BETWEEN_TOKENS._upper_bounds
# How long an answer's token gaps and count may wait in its TokenClock before /metrics shows them.
FLUSH_SECONDS = 1.0


class TokenClock:
    """Times one answer's tokens: the first against the start, the others against the previous one.

    The first is observed at once. The gaps after it are counted here, by bucket, and added to the
    histogram and the token counter together at most every FLUSH_SECONDS and at `flush()` (the
    stream's end): the same figures as one observation a token, without a lock, and in multiprocess
    mode a write to the shared file, for each token."""

    def __init__(self, started: float) -> None:
        self._started = started
        self._previous: float | None = None
        self._counts = [0] * len(_GAP_BOUNDS)
        self._gaps = 0
        self._sum = 0.0
        self._flush_at = 0.0

    def tick(self, now: float) -> None:
        previous, self._previous = self._previous, now
        if previous is None:
            first_token(now - self._started)
            self._flush_at = now + FLUSH_SECONDS
            return
        gap = now - previous
        self._counts[bisect_left(_GAP_BOUNDS, gap)] += 1
        self._gaps += 1
        self._sum += gap
        if now >= self._flush_at:
            self.flush()
            self._flush_at = now + FLUSH_SECONDS

    def flush(self) -> None:
        """Add the gaps counted since the last flush to the metrics."""
        if not self._gaps:
            return
        # Histogram.observe adds one observation; these are the same additions, many at once: the
        # bucket an observation falls in (the first whose bound is at least the gap) and the sum.
        for bucket, count in zip(TIME_BETWEEN_TOKENS._buckets, self._counts, strict=True):
            if count:
                bucket.inc(count)
        TIME_BETWEEN_TOKENS._sum.inc(self._sum)
        STREAMED_TOKENS.inc(self._gaps)
        self._counts = [0] * len(_GAP_BOUNDS)
        self._gaps = 0
        self._sum = 0.0


def generation_finished(
    status: str, completion_tokens: int | None, seconds: float, *, ttft_seconds: float | None = None
) -> None:
    """An answer ended with `status` (the stored message's) after `seconds`."""
    GENERATIONS.labels(status=str(status)).inc()
    GENERATION_DURATION.observe(seconds)
    if completion_tokens:
        COMPLETION_TOKENS.inc(completion_tokens)
        decode_seconds = seconds - (ttft_seconds or 0.0)
        if ttft_seconds is not None and completion_tokens > 1 and decode_seconds > 0:
            GENERATION_TOKENS_PER_SECOND.observe((completion_tokens - 1) / decode_seconds)


def admission_refused(reason: str) -> None:
    ADMISSIONS_REFUSED.labels(reason=reason).inc()


def engine_error(code: str) -> None:
    ENGINE_ERRORS.labels(code=code).inc()
