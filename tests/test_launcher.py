"""The inference process launcher: flags from configuration, clear failures."""

import pytest
from django.conf import settings

from inference.launcher import EngineConfig, EngineProcess, EngineStartError


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
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert config.environment()["VLLM_CPU_KVCACHE_SPACE"] == str(settings.INFERENCE_KV_CACHE_SPACE_GB)


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
