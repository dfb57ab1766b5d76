"""`make run`'s processes under supervisord (deploy/supervisor.py): each one killed, as an
out-of-memory kill ends it, comes back on its own while the others keep running."""

import os
import shlex
import signal
import time
from pathlib import Path

import psutil
import pytest
from supervisor.options import ServerOptions

from deploy.supervisor import Topology, procfile, render
from harness.processes import ROOT, free_port
from harness.supervision import Supervisord, answers, supervisord_running
from harness.waiting import wait_for
from tests.support.product import LOGS, product_env

pytestmark = pytest.mark.django_db(transaction=True)

# The engine is left out: runinference restarts its own server (test_chat_faults_end_to_end.py),
# and a second engine here would only cost a minute of start-up.
PROCESSES = ["redis", "web", "worker", "beat", "bulk"]


def pids(supervisor: Supervisord) -> dict[str, int]:
    return {name: supervisor.pid(name) for name in PROCESSES}


def commands_run(tmp_path: Path, topology: Topology) -> dict[str, list[str]]:
    """Read back by supervisord's own parser: each program and the command it runs."""
    (tmp_path / "supervisord.conf").write_text(render(tmp_path, topology))
    options = ServerOptions()
    options.realize(args=["-c", str(tmp_path / "supervisord.conf")])
    return {
        config.name: (shlex.split(config.command), config.environment)
        for group in options.process_group_configs
        for config in group.process_configs
    }


def test_the_rendered_configuration_runs_every_procfile_command_as_written(tmp_path):
    names = [name for name in procfile() if name != "nginx"]
    assert commands_run(tmp_path, Topology(names)) == {
        name: (["sh", "-c", "exec " + line], {}) for name, line in procfile().items() if name != "nginx"
    }
    with pytest.raises(SystemExit, match="not in the Procfile: proxy"):
        render(tmp_path, Topology(["web", "proxy"]))


def test_without_nginx_several_web_processes_share_one_socket_supervisord_keeps(tmp_path):
    programs = commands_run(tmp_path, Topology(["web"], web_port=9000, web_processes=2))
    web = ["sh", "-c", "exec " + procfile()["web"]]
    # The Procfile's own line; WEB_LISTEN_FD makes it accept from descriptor 0 (chatsite.daphne).
    assert programs == {"web-0": (web, {"WEB_LISTEN_FD": "0"}), "web-1": (web, {"WEB_LISTEN_FD": "0"})}
    options = ServerOptions()
    options.realize(args=["-c", str(tmp_path / "supervisord.conf")])
    [group] = options.process_group_configs
    assert (group.name, str(group.socket_config)) == ("web", "tcp://127.0.0.1:9000")
    assert group.socket_config.get_backlog() == 4096


def test_behind_nginx_each_web_process_has_a_port_of_its_own_and_trusts_only_this_host(tmp_path):
    programs = commands_run(tmp_path, Topology(["web", "nginx"], web_port=9000, web_processes=3))
    web = ["sh", "-c", "exec " + procfile()["web"]]
    assert programs == {
        "web-0": (web, {"WEB_PORT": "9001", "TRUSTED_PROXIES": "127.0.0.1"}),
        "web-1": (web, {"WEB_PORT": "9002", "TRUSTED_PROXIES": "127.0.0.1"}),
        "web-2": (web, {"WEB_PORT": "9003", "TRUSTED_PROXIES": "127.0.0.1"}),
        "nginx": (["sh", "-c", "exec " + procfile()["nginx"]], {}),
    }


def test_with_replicas_each_engine_is_a_program_of_its_own_behind_the_router(tmp_path):
    programs = commands_run(tmp_path, Topology(["inference", "router", "web"], engine_replicas=3))
    inference = ["sh", "-c", "exec " + procfile()["inference"]]
    # Every process learns the replicas' count from supervisord itself, however it was started.
    count = {"INFERENCE_REPLICAS": "3"}
    assert programs == {
        "inference-0": (inference, {**count, "INFERENCE_REPLICA": "0"}),
        "inference-1": (inference, {**count, "INFERENCE_REPLICA": "1"}),
        "inference-2": (inference, {**count, "INFERENCE_REPLICA": "2"}),
        "router": (["sh", "-c", "exec " + procfile()["router"]], count),
        "web": (["sh", "-c", "exec " + procfile()["web"]], count),
    }
    with pytest.raises(SystemExit, match="router"):
        Topology(["inference", "web"], engine_replicas=2)


def kill_and_see_it_return(supervisor: Supervisord, name: str, base: str, log: Path) -> dict[str, int]:
    """SIGKILL one process; it is restarted, the others keep their pids, and the site works again."""
    before = pids(supervisor)
    assert all(before.values()), before
    ready_lines = log.read_text().count(" ready.")
    os.kill(before[name], signal.SIGKILL)
    wait_for(lambda: supervisor.pid(name) not in {0, before[name]}, 60, f"{name} restarted")
    after = pids(supervisor)
    others_before = {n: pid for n, pid in before.items() if n != name}
    assert {n: pid for n, pid in after.items() if n != name} == others_before, f"{name} took another with it"
    # Back at work: the site answers, with Redis again, and a worker takes tasks again.
    wait_for(lambda: answers(base + "/healthz/ready"), 60, f"the site after {name} came back")
    if name in {"worker", "bulk"}:
        wait_for(lambda: log.read_text().count(" ready.") > ready_lines, 120, f"{name} ready again")
    return after


def test_each_process_comes_back_alone_when_killed(django_db_setup, engine_url, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "supervisord.conf").write_text(render(run_dir, Topology(PROCESSES)))
    web_port = free_port()
    # The bundled Redis, as make run starts it: with a password.
    redis_url = f"redis://:pw-{web_port}@127.0.0.1:{free_port()}/0"
    env = product_env(engine_url, REDIS_URL=redis_url, WEB_PORT=str(web_port))
    base = f"http://127.0.0.1:{web_port}"
    log = LOGS / "test-supervisord.log"
    began = time.time()
    with supervisord_running(run_dir / "supervisord.conf", env, log) as supervisor:
        wait_for(
            lambda: answers(base + "/healthz/ready") and log.read_text().count(" ready.") >= 2,
            120,
            "make run's processes",
        )
        for name in PROCESSES:
            after = kill_and_see_it_return(supervisor, name, base, log)
        text = log.read_text()
        for name in PROCESSES:
            assert f"exited: {name} (terminated by SIGKILL; not expected)" in text
    # Stopping supervisord stopped everything it ran, and no killed process left a child behind
    # (a worker with an embedded beat once did: a second scheduler nobody supervised).
    assert supervisor.process.returncode == 0
    for pid in after.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert orphans_since(began) == []


def orphans_since(began: float) -> list[str]:
    """Product processes of this checkout started since `began` whose parent is gone."""
    found = []
    for proc in psutil.process_iter(["ppid", "create_time", "cmdline", "cwd"]):
        info = proc.info
        command = " ".join(info["cmdline"] or [])
        if info["ppid"] == 1 and info["create_time"] >= began and info["cwd"] == str(ROOT):
            if any(name in command for name in ("celery", "daphne", "manage.py", "redis-server")):
                found.append(command)
    return found
