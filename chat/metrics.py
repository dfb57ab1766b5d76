"""The chat page's own Prometheus metrics: its sockets and the turns it stores. An answer's
metrics (tokens, time to first token, refusals) belong to the answer run, in answers.metrics.

Call sites (the consumer, the turn store) call the small functions below and never touch a
metric object. chat.apps loads this module at start, so /metrics (monitoring) shows them
before any socket opened (docs/monitoring.md).
"""

from prometheus_client import Counter, Gauge, Histogram

TURN_STORE_SECONDS = Histogram(
    "chat_turn_store_seconds",
    "Storing a turn before its answer starts: the usage quota read and the prompt and answer rows written.",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2),
)
WEBSOCKET_CONNECTIONS = Gauge(
    "chat_websocket_connections", "Open chat WebSocket connections.", multiprocess_mode="livesum"
)
WEBSOCKET_CONNECTIONS_OPENED = Counter("chat_websocket_connections_opened_total", "Accepted chat WebSockets.")


def turn_stored(seconds: float) -> None:
    TURN_STORE_SECONDS.observe(seconds)


def websocket_opened() -> None:
    WEBSOCKET_CONNECTIONS.inc()
    WEBSOCKET_CONNECTIONS_OPENED.inc()


def websocket_closed() -> None:
    WEBSOCKET_CONNECTIONS.dec()
