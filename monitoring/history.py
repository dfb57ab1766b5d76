"""The dashboard's recent past: a point every SAMPLE_SECONDS, the last HISTORY_SECONDS of them kept
in Redis, so the page opens with the last 15 minutes drawn instead of empty charts.

Celery beat, which runs once per site, queues `monitoring.tasks.record_history` every
SAMPLE_SECONDS; a Redis lock and the newest point's time keep a late task or a second beat from
writing the same moment twice. Each point is the dashboard's figures over the time since the
previous point (monitoring.figures.figures_between), measured from that point's raw snapshot,
which is kept beside the ring: the worker that records a point need not be the one that recorded
the last.

The web tier's own figures (answers, sockets, time to first token, tokens/s) and the host's are
recorded only where this process sees every web process's metrics, which is multiprocess mode on
the web processes' host (`make run`). Elsewhere (Kubernetes: a pod per process) they are recorded
as null rather than as this worker's own zeros; the engine's figures and the bulk jobs' (read from
the database) are recorded everywhere.

Redis failing raises, in the task and in the dashboard: nothing is kept in process memory instead.
"""

import json
import time

from django.conf import settings
from redis.exceptions import LockNotOwnedError

import redisconn
from monitoring.figures import Sample, figures_between, take_sample
from monitoring.host import cpu_percent_between, cpu_times
from monitoring.metrics import multiprocess_enabled
from redisconn import keys

HISTORY_SECONDS = 15 * 60
# Ten seconds (beat's "monitoring-history" entry, CELERY_BEAT_SCHEDULE): 90 points per chart, a line
# as fine as the one-minute window's figures need.
SAMPLE_SECONDS = settings.MONITORING_HISTORY_SAMPLE_SECONDS
# The points, as JSON scored by their time; the snapshot the next point is measured from; the
# writer's lock.
HISTORY_KEY = keys.MONITORING_HISTORY
LAST_SAMPLE_KEY = keys.MONITORING_HISTORY_LAST
WRITER_LOCK_KEY = keys.MONITORING_HISTORY_WRITER

# The figures a point keeps: what the charts draw (the tiles and tables show the present only).
WEB = (
    "ttft_p50_ms",
    "ttft_p95_ms",
    "tokens_per_second",
    "active_generations",
    "websocket_connections",
    "running_jobs",
    "queued_jobs",
)
# Those of WEB that each web process keeps in its own memory.
WEB_PER_PROCESS = {
    "ttft_p50_ms",
    "ttft_p95_ms",
    "tokens_per_second",
    "active_generations",
    "websocket_connections",
}
ENGINE = (
    "up",
    "running",
    "waiting",
    "kv_cache_usage",
    "prefix_cache_hit_rate",
    "tokens_per_second",
    "ttft_p50_ms",
)


def history_point(figures: dict, host: dict | None, *, sees_web_tier: bool) -> dict:
    """What a point keeps of the dashboard's figures: the charts' fields, in the same shape."""
    return {
        "time": figures["time"],
        "window_seconds": figures["window_seconds"],
        "web": {
            key: figures["web"][key] if sees_web_tier or key not in WEB_PER_PROCESS else None for key in WEB
        },
        "engine": {key: figures["engine"][key] for key in ENGINE},
        "host": host,
    }


def history_record() -> dict | None:
    """Record a point now; None when another writer holds the lock, a point is that recent, or
    there is no earlier snapshot to measure from yet (the first call only keeps one)."""
    r = redisconn.sync_client()
    lock = r.lock(WRITER_LOCK_KEY, timeout=SAMPLE_SECONDS * 3, blocking=False)
    if not lock.acquire():
        return None
    try:
        newest = r.zrevrange(HISTORY_KEY, 0, 0, withscores=True)
        if newest and time.time() - newest[0][1] < SAMPLE_SECONDS / 2:
            return None
        sample, read = take_sample()
        cpu = cpu_times()
        stored = r.get(LAST_SAMPLE_KEY)
        last = json.loads(stored) if stored else None
        point = None
        if last is not None and last["at"] < sample.at:
            base = Sample(at=last["at"], web=last["web"], replicas=last["replicas"])
            sees_web_tier = multiprocess_enabled()
            host = {"cpu_percent": cpu_percent_between(cpu, tuple(last["cpu"]))} if sees_web_tier else None
            point = history_point(figures_between(sample, base, read), host, sees_web_tier=sees_web_tier)
        kept = {"at": sample.at, "web": sample.web, "replicas": sample.replicas, "cpu": cpu}
        with r.pipeline(transaction=True) as pipe:
            if point is not None:
                pipe.zadd(HISTORY_KEY, {json.dumps(point): sample.at})
            pipe.zremrangebyscore(HISTORY_KEY, "-inf", sample.at - HISTORY_SECONDS)
            # Nothing outlives the history it could be part of.
            pipe.expire(HISTORY_KEY, HISTORY_SECONDS)
            pipe.set(LAST_SAMPLE_KEY, json.dumps(kept), ex=HISTORY_SECONDS)
            pipe.execute()
        return point
    finally:
        try:
            lock.release()
        except LockNotOwnedError:
            pass  # it expired while a slow engine answered; the next writer took over


def history_points() -> list[dict]:
    """The last HISTORY_SECONDS of points, oldest first."""
    r = redisconn.sync_client()
    found = r.zrangebyscore(HISTORY_KEY, time.time() - HISTORY_SECONDS, "+inf")
    return [json.loads(point) for point in found]
