"""The embedding engine as the tests start it: through the product's launcher (runembeddings'
EmbeddingConfig and EngineProcess), with the engine's key, on a free port, the default model
unpacked once under DATA_DIR."""

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import httpx
from django.conf import settings

from enginehost.embedlaunch import EmbeddingConfig
from enginehost.embedmodel import prepare_embedding_model
from enginehost.launcher import EngineProcess
from harness.processes import free_port
from inference.topology import metric_sums
from tests.support.product import LOGS

KEY = "embedding-key-" + "e" * 30
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL = "all-minilm-l6-v2"


def embedding_config(**changes) -> EmbeddingConfig:
    prepare_embedding_model(Path(settings.EMBEDDING_MODEL), report=lambda line: None)
    config = EmbeddingConfig.from_settings(settings)
    return replace(config, url=f"http://127.0.0.1:{free_port()}", api_key=KEY, **changes)


@contextmanager
def embedding_server(name: str, timeout: float = 300, **changes):
    """The URL of a running embedding server of `changes`' configuration, stopped on the way out."""
    config = embedding_config(**changes)
    with open(LOGS / f"test-{name}.log", "w") as log:
        server = EngineProcess(config, output=log)
        server.start()
        try:
            server.wait_healthy(timeout=timeout)
            yield config.url
        finally:
            server.stop()


def embedding_metric(url: str, name: str, **labels: str) -> float:
    """One sample of the server's /metrics (summed over the labels not given)."""
    text = httpx.get(f"{url}/metrics", headers=AUTH, timeout=5).text
    if not labels:
        return metric_sums(text, [name])[name]
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(f"{name}{{{wanted}")
    )


def post(url: str, body: dict, headers=AUTH) -> httpx.Response:
    return httpx.post(f"{url}/v1/embeddings", json=body, headers=headers, timeout=60)


def vectors(url: str, texts: list[str]) -> list[list[float]]:
    response = post(url, {"model": MODEL, "input": texts})
    assert response.status_code == 200, response.text
    return [item["embedding"] for item in response.json()["data"]]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))
