"""The embedding engine's command and environment: what `runembeddings` starts and keeps serving
(under enginehost.launcher's EngineSupervisor, as the chat engine is).

Two runners behind the same OpenAI-shaped `/v1/embeddings`: `transformers`, the product's own
server (enginehost.embedserver), and `vllm`, vLLM's OpenAI server with its pooling runner. Both get
the engine's key guard when a key is set, and only the environment an engine reads.
"""

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from enginehost.embedmodel import model_dimensions
from enginehost.launcher import EngineStartError, check_model, engine_environment, nvidia_driver_present


@dataclass(frozen=True)
class EmbeddingConfig:
    runner: str
    model: str
    served_model_name: str
    url: str
    dimensions: int
    max_tokens: int
    max_batch: int
    max_queue: int
    query_texts: int
    quantize: bool = False
    gpu_memory_utilization: float = 0.05
    api_key: str = ""
    # The server's niceness (EMBEDDING_NICE), read by EngineProcess as the chat engine's is.
    nice: int = 0

    @classmethod
    def from_settings(cls, settings) -> "EmbeddingConfig":
        return cls(
            runner=settings.EMBEDDING_RUNNER,
            model=settings.EMBEDDING_MODEL,
            served_model_name=settings.EMBEDDING_MODEL_NAME,
            url=settings.EMBEDDING_URL,
            dimensions=settings.EMBEDDING_DIMENSIONS,
            max_tokens=settings.EMBEDDING_MAX_TOKENS,
            max_batch=settings.EMBEDDING_MAX_BATCH,
            max_queue=settings.EMBEDDING_MAX_QUEUE,
            query_texts=settings.EMBEDDING_QUERY_TEXTS,
            quantize=settings.EMBEDDING_QUANTIZE,
            gpu_memory_utilization=settings.EMBEDDING_GPU_MEMORY_UTILIZATION,
            api_key=settings.INFERENCE_API_KEY,
            nice=settings.EMBEDDING_NICE,
        )

    def check(self) -> None:
        """Raise EngineStartError for a configuration that cannot start: a model that is not
        there, or one whose vectors are not EMBEDDING_DIMENSIONS long."""
        check_model("EMBEDDING_MODEL", self.model, "prepare_embedding_model")
        made = model_dimensions(self.model)
        if made is not None and made != self.dimensions:
            raise EngineStartError(
                f"EMBEDDING_MODEL={self.model!r} makes vectors of {made} dimensions, "
                f"EMBEDDING_DIMENSIONS={self.dimensions}: set it to {made}"
            )

    def command(self) -> list[str]:
        address = urlsplit(self.url)
        host, port = address.hostname or "127.0.0.1", str(address.port or 80)
        if self.runner == "transformers":
            return [
                sys.executable, "-m", "enginehost.embedserver",
                "--model", self.model,
                "--served-model-name", self.served_model_name,
                "--host", host,
                "--port", port,
                "--max-tokens", str(self.max_tokens),
                "--max-batch", str(self.max_batch),
                "--max-queue", str(self.max_queue),
                "--query-texts", str(self.query_texts),
                *(["--quantize"] if self.quantize else []),
            ]  # fmt: skip
        args = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--runner", "pooling",
            "--host", host,
            "--port", port,
            "--max-model-len", str(self.max_tokens),
            "--max-num-seqs", str(self.max_batch),
            "--gpu-memory-utilization", str(self.gpu_memory_utilization),
            "--scheduling-policy", "priority",
            "--disable-uvicorn-access-log",
        ]  # fmt: skip
        if self.api_key:
            args += ["--middleware", "enginehost.keyguard.KeyGuard"]
        return args

    def environment(self) -> dict[str, str]:
        env = engine_environment(os.environ)
        if self.api_key:
            # Read by the key guard in the server's process (enginehost.keyguard).
            env["INFERENCE_API_KEY"] = self.api_key
        if Path(self.model).is_dir():
            env.setdefault("HF_HUB_OFFLINE", "1")
        if self.runner == "vllm" and not nvidia_driver_present():
            # The CPU build's KV cache, which a pooling model barely uses (GiB), and every core
            # for the model, as for the chat engine.
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        return env
