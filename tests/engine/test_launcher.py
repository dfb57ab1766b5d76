"""The inference process launcher: flags from configuration, clear failures.

Why one module of about 410 lines: one command's flags, supervision and failures, sharing the
child process (FAKE_SERVER) they all run.
"""

import os
import signal
import sys
from threading import Thread
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings

from enginehost.launcher import EngineConfig, EngineProcess, EngineStartError, EngineSupervisor, phase_of
from harness.processes import free_port
from harness.waiting import wait_for


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


# A stand-in server for the supervisor's own behaviour (the real engine's restart is tested in
# test_chat_faults_end_to_end.py): it starts a worker in its group, as vLLM starts its engine
# core, writes the worker's pid, then serves /health until killed, or exits at once with
# VLLM_TEST_EXIT_AT_ONCE set.
FAKE_SERVER = """
import http.server, os, subprocess, sys, time
if os.environ.get("VLLM_TEST_EXIT_AT_ONCE"):
    sys.exit(3)
if os.environ.get("VLLM_TEST_ANNOUNCE_STEPS"):
    # vLLM's own lines, each held long enough for the supervisor's half-second look.
    for line in ["(Worker pid=1) INFO [cpu_model_runner.py:68] Starting to load model /m...",
                 "(EngineCore pid=2) INFO [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens"]:
        print(line, flush=True)
        time.sleep(1.2)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(os.environ["VLLM_TEST_WORKER_PID_FILE"], "a") as pids:
    pids.write(f"{worker.pid}\\n")
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


class FakeServerConfig(EngineConfig):
    def command(self) -> list[str]:
        return [sys.executable, "-c", FAKE_SERVER, str(urlsplit(self.url).port)]


def fake_server_config(tmp_path, monkeypatch, **env: str) -> FakeServerConfig:
    monkeypatch.setenv("VLLM_TEST_WORKER_PID_FILE", str(tmp_path / "workers"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    base = EngineConfig.from_settings(settings)
    return FakeServerConfig(**{**base.__dict__, "url": f"http://127.0.0.1:{free_port()}", "model": ""})


def supervised(tmp_path, monkeypatch, first_delay: float, **env: str) -> tuple[EngineSupervisor, list[str]]:
    """A supervisor of the stand-in server, restarting after `first_delay`: (it, the lines it logs)."""
    lines: list[str] = []
    monkeypatch.setattr(EngineSupervisor, "RESTART_DELAY_FIRST", first_delay)
    config = fake_server_config(tmp_path, monkeypatch, **env)
    return EngineSupervisor(config, startup_timeout=30, log=lines.append), lines


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: it only waits for its parent to read its status.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_engine_and_its_workers_run_as_nice_as_configured(tmp_path, monkeypatch):
    from dataclasses import replace

    config = replace(fake_server_config(tmp_path, monkeypatch), nice=7)
    engine = EngineProcess(config)
    engine.start()
    try:
        engine.wait_healthy(timeout=30)
        worker = int((tmp_path / "workers").read_text().split()[0])
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        for pid in (engine.process.pid, worker):
            assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + 7)
    finally:
        engine.stop()


def test_the_supervisor_restarts_a_killed_server_and_kills_the_workers_it_left(tmp_path, monkeypatch):
    supervisor, lines = supervised(tmp_path, monkeypatch, 0.1)

    def kill_the_first_server():
        wait_for(lambda: any(line.startswith("Engine ready") for line in lines), 30, "the first start")
        os.kill(supervisor.engine.process.pid, signal.SIGKILL)

    killer = Thread(target=kill_the_first_server)
    killer.start()
    supervisor.run(until=lambda: True)
    killer.join()
    [reason] = [line for line in lines if line.startswith("The engine stopped")]
    assert "killed by SIGKILL" in reason
    [worker] = [int(pid) for pid in (tmp_path / "workers").read_text().split()]
    wait_for(lambda: not alive(worker), 10, "the killed server's worker to be gone")


def test_the_supervisor_starts_the_server_again_with_doubling_delays(tmp_path, monkeypatch):
    supervisor, lines = supervised(tmp_path, monkeypatch, 0.05, VLLM_TEST_EXIT_AT_ONCE="1")
    monkeypatch.setattr(EngineSupervisor, "RESTART_DELAY_MAX", 0.2)
    supervisor.run(until=lambda: supervisor.starts == 5)
    delays = [line.rsplit(" in ", 1)[1] for line in lines if line.startswith("Starting the engine again")]
    assert delays == ["0.05s.", "0.1s.", "0.2s.", "0.2s."]
    stops = [line for line in lines if line.startswith("The engine stopped")]
    assert len(stops) == 5
    assert all("exited with status 3 while starting" in line for line in stops)


def test_the_supervisor_serves_again_after_a_kill(tmp_path, monkeypatch):
    supervisor, lines = supervised(tmp_path, monkeypatch, 0.1)

    def kill_then_check():
        wait_for(lambda: supervisor.starts == 1 and "Engine ready" in " ".join(lines), 30, "the first start")
        os.kill(supervisor.engine.process.pid, signal.SIGKILL)
        wait_for(lambda: supervisor.starts == 2 and lines[-1].startswith("Engine ready"), 30, "the restart")
        assert httpx.get(supervisor.config.url + "/health").status_code == 200
        os.kill(os.getpid(), signal.SIGUSR1)

    def stop(signum, frame):
        raise SystemExit(0)

    previous = signal.signal(signal.SIGUSR1, stop)
    checker = Thread(target=kill_then_check)
    checker.start()
    try:
        with pytest.raises(SystemExit):
            supervisor.run()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        checker.join()
    # Leaving run() through the signal stopped the server it was serving.
    assert supervisor.engine.process.poll() is not None
    workers = [int(pid) for pid in (tmp_path / "workers").read_text().split()]
    assert len(workers) == 2
    wait_for(lambda: not any(alive(pid) for pid in workers), 10, "every worker to be gone")


def test_the_supervisor_tells_each_start_up_step_then_serving(tmp_path, monkeypatch):
    supervisor, lines = supervised(tmp_path, monkeypatch, 0.1, VLLM_TEST_ANNOUNCE_STEPS="1")
    states = []
    supervisor.on_state = lambda state, detail: states.append((state, detail))

    def stop_once_ready():
        wait_for(lambda: ("serving", "") in states, 30, "the server to serve")
        os.kill(supervisor.engine.process.pid, signal.SIGKILL)

    stopper = Thread(target=stop_once_ready)
    stopper.start()
    supervisor.run(until=lambda: True)
    stopper.join()
    assert states == [
        ("starting", "starting its server"),
        ("starting", "loading the model's weights"),
        ("starting", "sizing its KV cache and warming up"),
        ("serving", ""),
    ]


@pytest.mark.parametrize(
    "line, phase",
    [
        (
            "(EngineCore pid=32017) INFO 12-01 10:10:18 [core.py:133] Initializing a V1 LLM engine (v0.32.0)",
            "starting its engine core",
        ),
        (
            "Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]",
            "loading the model's weights",
        ),
        (
            "(EngineCore pid=1) INFO [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens",
            "sizing its KV cache and warming up",
        ),
        ("(APIServer pid=1) INFO:     Application startup complete.", "opening its API"),
        ("(APIServer pid=1) WARNING [system_utils.py:255] Found ulimit of 20000", None),
    ],
)
def test_it_reads_the_start_up_step_from_the_servers_own_lines(line, phase):
    assert phase_of(line) == phase


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
