"""The inference process launcher: vLLM's flags and environment from configuration, clear failures,
and the engine's key on every route but /health."""

import os

import httpx
import pytest
from django.conf import settings

from enginehost.launcher import EngineConfig, EngineProcess, EngineStartError
from harness.processes import free_port


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_it_takes_every_batch_and_memory_limit_from_configuration(monkeypatch):
    config = EngineConfig.from_settings(settings)
    command = config.command()
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flag(command, "--max-model-len") == str(settings.INFERENCE_MAX_MODEL_LEN)
    assert flag(command, "--max-num-seqs") == str(settings.INFERENCE_MAX_NUM_SEQS)
    assert flag(command, "--max-num-batched-tokens") == str(settings.INFERENCE_MAX_NUM_BATCHED_TOKENS)
    assert flag(command, "--block-size") == str(settings.INFERENCE_BLOCK_SIZE)
    assert flag(command, "--gpu-memory-utilization") == str(settings.INFERENCE_GPU_MEMORY_UTILIZATION)
    assert flag(command, "--scheduling-policy") == "priority"
    assert "--enable-prefix-caching" in command
    assert "--enable-prompt-tokens-details" in command
    assert ("--enforce-eager" in command) == settings.INFERENCE_ENFORCE_EAGER
    assert "--tensor-parallel-size" not in command  # one device unless configured
    assert "--speculative-config" not in command  # off unless configured
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert config.environment()["VLLM_CPU_KVCACHE_SPACE"] == str(settings.INFERENCE_KV_CACHE_SPACE_GB)


def test_it_spreads_the_model_over_the_configured_gpus():
    from dataclasses import replace

    command = replace(EngineConfig.from_settings(settings), tensor_parallel_size=4).command()
    assert flag(command, "--tensor-parallel-size") == "4"


def test_each_replica_serves_above_the_router_on_a_share_of_the_host_of_its_own(settings, monkeypatch):
    import shutil

    settings.INFERENCE_URL, settings.INFERENCE_REPLICAS = "http://127.0.0.1:8100", 2
    settings.INFERENCE_REPLICA = 1
    config = EngineConfig.from_settings(settings)
    assert config.url == "http://127.0.0.1:8102"
    assert flag(config.command(), "--port") == "8102"
    # CPU: a half of the cores each, so the two engines' threads do not spin against each other.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(shutil, "which", {}.get)
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    assert config.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "2,3"
    # ...unless the operator bound them already, or there are fewer cores than replicas.
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0-3")
    assert config.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "0-3"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert config.replica_devices() == {}
    # CUDA: its own GPUs, as many as one engine spreads the model over.
    from dataclasses import replace

    monkeypatch.setattr(shutil, "which", {"nvidia-smi": "/usr/bin/nvidia-smi"}.get)
    assert replace(config, tensor_parallel_size=2).replica_devices() == {"CUDA_VISIBLE_DEVICES": "2,3"}
    # ...out of the operator's own list where one is set, and never fewer than it needs.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert config.replica_devices() == {"CUDA_VISIBLE_DEVICES": "5"}
    with pytest.raises(EngineStartError, match="too few for 2 replicas"):
        replace(config, tensor_parallel_size=2).replica_devices()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    # The only engine keeps INFERENCE_URL and the whole host.
    settings.INFERENCE_REPLICA = -1
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    alone = EngineConfig.from_settings(settings)
    assert alone.url == settings.INFERENCE_URL
    assert not {"VLLM_CPU_OMP_THREADS_BIND", "CUDA_VISIBLE_DEVICES"} & set(alone.environment())


def test_a_lone_cpu_engine_computes_on_every_core_unless_told_otherwise(monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", {}.get)
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    config = EngineConfig.from_settings(settings)
    # vLLM's automatic binding, with no core kept off the model (its default keeps one).
    assert config.environment()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    assert config.environment()["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    # CUDA hosts: nothing of the kind.
    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU")
    monkeypatch.setattr(shutil, "which", {"nvidia-smi": "/usr/bin/nvidia-smi"}.get)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in config.environment()


def test_a_compiling_cpu_engine_reuses_its_compiled_graph_across_restarts(monkeypatch):
    import shutil
    from dataclasses import replace

    monkeypatch.setattr(shutil, "which", {}.get)
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    config = EngineConfig.from_settings(settings)
    assert "VLLM_USE_AOT_COMPILE" not in replace(config, enforce_eager=True).environment()
    compiled = replace(config, enforce_eager=False)
    # vLLM's AOT artifact does not load in the CPU build; torch's compile cache does.
    assert compiled.environment()["VLLM_USE_AOT_COMPILE"] == "0"
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    assert compiled.environment()["VLLM_USE_AOT_COMPILE"] == "1"
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE")
    monkeypatch.setattr(shutil, "which", {"nvidia-smi": "/usr/bin/nvidia-smi"}.get)
    assert "VLLM_USE_AOT_COMPILE" not in compiled.environment()


def test_graph_capture_and_compiling_are_on_by_default_on_every_host(monkeypatch):
    import importlib
    import shutil

    from chatsite import settings as product

    monkeypatch.delenv("INFERENCE_ENFORCE_EAGER", raising=False)
    try:
        for which in ({"nvidia-smi": "/usr/bin/nvidia-smi"}.get, {}.get):
            monkeypatch.setattr(shutil, "which", which)
            assert importlib.reload(product).INFERENCE_ENFORCE_EAGER is False
        monkeypatch.setenv("INFERENCE_ENFORCE_EAGER", "true")
        assert importlib.reload(product).INFERENCE_ENFORCE_EAGER is True
    finally:
        monkeypatch.undo()
        importlib.reload(product)


def test_it_turns_on_n_gram_speculation_with_the_configured_draft_length():
    import json
    from dataclasses import replace

    config = replace(EngineConfig.from_settings(settings), speculative="ngram", speculative_tokens=6)
    spec = json.loads(flag(config.command(), "--speculative-config"))
    assert (spec["method"], spec["num_speculative_tokens"]) == ("ngram", 6)
    assert (spec["prompt_lookup_min"], spec["prompt_lookup_max"]) == (2, 4)
    assert "num_speculative_tokens_per_batch_size" not in spec  # at every batch size
    small = replace(config, max_num_seqs=64, speculative_max_batch=4)
    spec = json.loads(flag(small.command(), "--speculative-config"))
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 4, 6], [5, 64, 0]]


def test_the_engine_and_its_router_get_the_api_key_out_of_sight_of_the_process_list(settings, monkeypatch):
    from dataclasses import replace

    from enginehost.router import RouterConfig

    # The web tier's secrets in the supervisor's environment: none of them reaches an engine or the router.
    for name in (
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "MONITORING_METRICS_TOKEN",
        "PROMETHEUS_MULTIPROC_DIR",
    ):
        monkeypatch.setenv(name, "secret-" + name)
    settings.INFERENCE_API_KEY = "k" * 40
    config = EngineConfig.from_settings(settings)
    environment = config.environment()
    assert environment["INFERENCE_API_KEY"] == "k" * 40
    assert not any("k" * 40 in part for part in config.command())
    # Checked on every route but /health by the key guard, not by vLLM's own check of /v1 alone.
    assert flag(config.command(), "--middleware") == "enginehost.keyguard.KeyGuard"
    assert "VLLM_API_KEY" not in environment
    assert not [value for value in environment.values() if value.startswith("secret-")]
    keyless = replace(config, api_key="")
    assert "INFERENCE_API_KEY" not in keyless.environment() and "--middleware" not in keyless.command()
    router = RouterConfig.from_settings(settings, worker_urls=["http://127.0.0.1:8101"])
    assert "--api-key" not in router.command() and not any("k" * 40 in part for part in router.command())
    assert router.environment()["INFERENCE_API_KEY"] == "k" * 40
    assert not [value for value in router.environment().values() if value.startswith("secret-")]


def test_the_routers_launcher_takes_the_key_from_the_environment_or_its_file(tmp_path, monkeypatch):
    from enginehost import routerlaunch

    monkeypatch.delenv("INFERENCE_API_KEY", raising=False)
    monkeypatch.delenv("INFERENCE_API_KEY_FILE", raising=False)
    assert routerlaunch.engine_key() == ""
    (tmp_path / "key").write_text("from-a-file\n")
    monkeypatch.setenv("INFERENCE_API_KEY_FILE", str(tmp_path / "key"))
    assert routerlaunch.engine_key() == "from-a-file"
    monkeypatch.setenv("INFERENCE_API_KEY", "from-the-environment")
    assert routerlaunch.engine_key() == "from-the-environment"


def test_it_passes_extra_flags_and_can_turn_prefix_caching_off():
    from dataclasses import replace

    config = replace(
        EngineConfig.from_settings(settings), prefix_caching=False, extra_args="--seed 7 --max-logprobs '3'"
    )
    command = config.command()
    assert "--no-enable-prefix-caching" in command
    assert command[-4:] == ["--seed", "7", "--max-logprobs", "3"]


def test_it_says_why_when_the_engine_fails_to_start(tmp_path):
    from dataclasses import replace

    broken = tmp_path / "not-a-model"
    broken.mkdir()
    config = replace(EngineConfig.from_settings(settings), model=str(broken), url="http://127.0.0.1:1")
    engine = EngineProcess(config)
    engine.start()
    with pytest.raises(EngineStartError) as failure:
        engine.wait_healthy(timeout=300)
    message = str(failure.value)
    assert "exited with status" in message
    assert "not-a-model" in message


def test_it_refuses_a_model_that_is_neither_a_directory_nor_a_hub_id():
    from dataclasses import replace

    config = replace(EngineConfig.from_settings(settings), model="missing-model")
    with pytest.raises(EngineStartError, match="prepare_model"):
        EngineProcess(config).start()


def test_an_engine_started_with_the_api_key_answers_the_product_and_refuses_anyone_else():
    """The engine checks the key the launcher gives it on every route but /health: a pod that
    reaches the engine without it is refused; the product's client, which sends it, is answered."""
    import asyncio
    from dataclasses import replace

    from inference.client import ChatRequest, OpenAIEngineClient, TextDelta
    from tests.support.product import LOGS

    url = f"http://127.0.0.1:{free_port()}"
    key = "engine-key-" + "x" * 30
    config = replace(
        EngineConfig.from_settings(settings), url=url, api_key=key, kv_cache_space_gb=1, max_num_seqs=2
    )
    messages = [{"role": "user", "content": "Hi"}]

    async def answer() -> list:
        client = OpenAIEngineClient(
            url, config.served_model_name, connect_timeout=5, token_timeout=60, api_key=key
        )
        try:
            request = ChatRequest(messages=messages, max_tokens=2, temperature=0)
            return [event async for event in client.stream_chat(request)]
        finally:
            await client.aclose()

    with open(LOGS / "test-engine-key.log", "w") as log:
        engine = EngineProcess(config, output=log)
        engine.start()
        try:
            engine.wait_healthy(timeout=600)
            body = {"model": config.served_model_name, "messages": messages, "max_tokens": 2}
            assert httpx.post(url + "/v1/chat/completions", json=body, timeout=60).status_code == 401
            # Every route, not only vLLM's own /v1: a wrong key or none is refused, /health alone is open.
            wrong = {"Authorization": "Bearer wrong"}
            assert httpx.post(url + "/invocations", json=body, headers=wrong, timeout=60).status_code == 401
            assert httpx.post(url + "/tokenize", json={"prompt": "hi"}, timeout=60).status_code == 401
            assert httpx.get(url + "/metrics", timeout=60).status_code == 401
            assert httpx.get(url + "/health", timeout=60).status_code == 200
            assert (
                httpx.get(
                    url + "/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=60
                ).status_code
                == 200
            )
            assert any(isinstance(event, TextDelta) for event in asyncio.run(answer()))
        finally:
            engine.stop()
