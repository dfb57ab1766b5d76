"""Several engine replicas behind vLLM's router (`vllm-router`, the Rust load balancer of the vLLM
project), on one host: `make run INFERENCE_REPLICAS=2`.

The router answers at INFERENCE_URL, so the web tier and the bulk workers keep one address;
replica i serves at INFERENCE_URL's port + 1 + i (`runinference` with INFERENCE_REPLICA=i), the
address inference.topology computes for the router and for those who read the replicas alike. On
Kubernetes the router finds the engine pods itself (deploy/k8s/router.yaml) and nothing here runs.

Why these router flags (measured in docs/deploy.md and docs/benchmarks.md):
- `consistent_hash` keys on X-Session-ID, which every chat request carries as its conversation,
  so each conversation's turns reach the replica that holds its prefix.
- A replica that fails one request is set aside at once (`--cb-failure-threshold 1`): the answer
  in flight on a dead replica ends with an error, and the conversation's next turn, sent a moment
  later, goes to a live replica instead of failing too. Health checks every 2 s mark it down
  after two misses and back up after one answer, and its breaker lets requests try it again
  after 5 s, so a restarted replica takes its conversations back within seconds of serving.
- The router does not listen until every replica answers its health check at start, checked
  every second rather than its default 30.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from inference.topology import replica_urls

# vllm-router's own launcher, given the engines' key by environment (enginehost.routerlaunch).
ROUTER_LAUNCH = [sys.executable, "-m", "enginehost.routerlaunch"]
PRODUCT_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class RouterConfig:
    url: str
    worker_urls: tuple[str, ...]
    policy: str = "consistent_hash"
    metrics_port: int = 29000
    startup_timeout: float = 600.0
    # The engines' key (INFERENCE_API_KEY), which the router sends them.
    api_key: str = ""

    @classmethod
    def from_settings(cls, settings, worker_urls: list[str] | None = None) -> "RouterConfig":
        return cls(
            url=settings.INFERENCE_URL,
            worker_urls=tuple(worker_urls or replica_urls(settings)),
            policy=settings.INFERENCE_ROUTER_POLICY,
            metrics_port=settings.INFERENCE_ROUTER_METRICS_PORT,
            startup_timeout=settings.INFERENCE_STARTUP_TIMEOUT,
            api_key=settings.INFERENCE_API_KEY,
        )

    def routing_flags(self) -> list[str]:
        """How the router picks a replica and sets a failing one aside; the Kubernetes router
        (deploy/k8s/router.yaml) passes the same."""
        return [
            "--policy", self.policy,
            "--worker-startup-check-interval", "1",
            "--health-check-interval-secs", "2",
            "--health-failure-threshold", "2",
            "--health-success-threshold", "1",
            "--cb-failure-threshold", "1",
            # Tried again after 5 s: by then the health checks have set a dead replica aside.
            "--cb-timeout-duration-secs", "5",
            "--cb-success-threshold", "1",
            # An answer may stream for as long as the chat's own deadlines allow.
            "--request-timeout-secs", "3600",
        ]  # fmt: skip

    def command(self) -> list[str]:
        address = urlsplit(self.url)
        return [
            *ROUTER_LAUNCH,
            "--host", address.hostname or "127.0.0.1",
            "--port", str(address.port or 80),
            "--worker-urls", *self.worker_urls,
            "--prometheus-host", address.hostname or "127.0.0.1",
            "--prometheus-port", str(self.metrics_port),
            "--worker-startup-timeout-secs", str(int(self.startup_timeout)),
            *self.routing_flags(),
        ]  # fmt: skip

    def environment(self) -> dict[str, str]:
        # The process basics and its key, not the web tier's secrets. The router logs three lines
        # per request at its default level.
        basics = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TZ")}
        key = {"INFERENCE_API_KEY": self.api_key} if self.api_key else {}
        # The product on its import path, for its launcher, wherever the process starts.
        path = os.pathsep.join(filter(None, [str(PRODUCT_ROOT), os.environ.get("PYTHONPATH")]))
        return {**basics, **key, "PYTHONPATH": path, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
