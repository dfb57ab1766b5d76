"""The engine boundary's Prometheus metrics: the circuit breaker's state."""

from prometheus_client import Gauge

CIRCUIT_STATES = {"closed": 0, "half_open": 1, "open": 2}

CIRCUIT_STATE = Gauge(
    "chat_engine_circuit_state",
    "Engine circuit breaker: 0 closed, 1 half-open, 2 open (the worst over processes).",
    multiprocess_mode="livemax",
)


def circuit_state(state: str) -> None:
    """The breaker moved to `closed`, `half_open` or `open`."""
    CIRCUIT_STATE.set(CIRCUIT_STATES[state])
