"""The engine's supervisor (`runinference`): it starts the server again when it dies, after
doubling delays, kills the workers a dead server left, runs the engine and its workers as nice as
configured, and tells each start-up step and then serving. Against a stand-in server that starts
a worker in its group as vLLM does; the real engine's restart is tested in
tests/chat/test_chat_faults_end_to_end.py."""

import os
import signal
import sys
from threading import Thread
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings

from enginehost.launcher import EngineConfig, EngineProcess, phase_of
from enginehost.supervisor import EngineSupervisor
from harness.processes import free_port
from harness.waiting import wait_for

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
