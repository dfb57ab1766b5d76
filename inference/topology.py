"""The engines behind one address, and what they are doing: vLLM's router in front of several
replicas (enginehost.router), or one engine. Every probe reads them here: the synchronous ones
behind /healthz and the staff dashboard, and the bulk shaper's load, awaited on its event loop.

The router's own /metrics answers for one replica only, so each engine's metrics are read from
the engine itself, found in the router's /workers; an engine has no /workers and stands for itself.
"""

import asyncio
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from inference.client import EngineError, EngineLoad, ReplicaMetrics

# Probes answer at once or report the engine unreachable: a health check must not hang.
PROBE_TIMEOUT = 2.0
DEFAULT_PORTS = {"http": 80, "https": 443}
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"


def replica_url(base_url: str, index: int) -> str:
    """Replica `index`'s address on this host: the router's port + 1 + index."""
    address = urlsplit(base_url)
    port = (address.port or DEFAULT_PORTS.get(address.scheme, 80)) + 1 + index
    host = address.hostname or "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    return urlunsplit((address.scheme, f"{host}:{port}", "", "", ""))


def replica_urls(settings) -> list[str]:
    """The engines `make run` starts: INFERENCE_URL itself, or its replicas behind the router."""
    if settings.INFERENCE_REPLICAS == 1:
        return [settings.INFERENCE_URL]
    return [replica_url(settings.INFERENCE_URL, index) for index in range(settings.INFERENCE_REPLICAS)]


def router_workers(body: object) -> list[tuple[str, bool]]:
    """The router's `/workers` answer as (engine address, healthy) pairs, by address; ValueError
    for an answer of another shape."""
    try:
        return sorted((worker["url"].rstrip("/"), bool(worker["is_healthy"])) for worker in body["workers"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a router's worker list: {exc!r}") from exc


def metric_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """Each named sample of an engine's /metrics text, summed over its labels."""
    sums = dict.fromkeys(names, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in sums:
                sums[sample.name] += sample.value
    return sums


class EngineTopology:
    """The EngineProbe of the engines behind `url` (a router, or one engine). Each read blocks for
    PROBE_TIMEOUT at most; `load` runs its reads in a thread, off its caller's event loop."""

    def __init__(self, url: str, *, api_key: str = "") -> None:
        self.url = url
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def _get(self, base: str, path: str) -> httpx.Response:
        response = httpx.get(base.rstrip("/") + path, headers=self._headers, timeout=PROBE_TIMEOUT)
        response.raise_for_status()
        return response

    def health(self) -> str:
        try:
            self._get(self.url, "/health")
        except httpx.HTTPStatusError as exc:
            return f"error: status {exc.response.status_code}"
        except httpx.HTTPError as exc:
            return f"error: {exc.__class__.__name__}"
        return "ok"

    def replicas(self) -> list[tuple[str, bool | None]]:
        # An engine has no /workers; where nothing answers, the address itself is all there is to report.
        try:
            return router_workers(self._get(self.url, "/workers").json())
        except (httpx.HTTPError, ValueError):
            return [(self.url, None)]

    def metrics(self) -> list[ReplicaMetrics]:
        replicas = []
        for url, healthy in self.replicas():
            try:
                replicas.append(ReplicaMetrics(url, healthy, self._get(url, "/metrics").text, None))
            except httpx.HTTPError as exc:
                replicas.append(ReplicaMetrics(url, healthy, None, f"{exc.__class__.__name__}: {exc}"))
        return replicas

    async def load(self) -> EngineLoad:
        return await asyncio.to_thread(self._load)

    def _load(self) -> EngineLoad:
        serving = [url for url, healthy in self.replicas() if healthy is not False]
        if not serving:
            # Not an idle engine: none at all, and bulk work must wait as it does for a dead one.
            raise EngineError("No engine behind the router is healthy.", code="engine_unavailable")
        running = waiting = 0
        for url in serving:
            try:
                gauges = metric_sums(self._get(url, "/metrics").text, (RUNNING, WAITING))
            except httpx.HTTPError as exc:
                raise EngineError(
                    f"The engine's metrics could not be read: {exc.__class__.__name__}",
                    code="engine_unavailable",
                ) from exc
            running += int(gauges[RUNNING])
            waiting += int(gauges[WAITING])
        return EngineLoad(running=running, waiting=waiting)
