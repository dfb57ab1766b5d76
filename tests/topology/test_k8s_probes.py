"""deploy/k8s's probes: the web and engine probes reach the health views on the ports the processes
listen on, a stopping web pod drains before it is killed, an engine pod is restarted only when its
server stays down longer than its supervisor's restart, and the Celery processes' probes
(commands) pass while the process works and fail once it is stuck."""

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from celery.beat import Scheduler
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.urls import resolve

from deploy.supervisor import STOP_WAIT, procfile
from enginehost.supervisor import EngineSupervisor
from harness.processes import ROOT, stop_group
from harness.waiting import wait_for
from monitoring import health
from tests.topology.k8s import (
    PROCESSES,
    allowed_hosts,
    config,
    engine_port,
    flag_values,
    main_container,
    one,
    pod_labels,
    pod_spec,
    port_number,
    setting,
    workloads,
)


def test_the_web_probes_reach_the_health_views_on_the_web_port(objects):
    values = config(objects)
    # The Procfile's default, 127.0.0.1, would not answer the kubelet or the Service.
    assert values["WEB_BIND"] in {"0.0.0.0", "::"}
    web = main_container(workloads(objects)["web"])
    port = int(values["WEB_PORT"])
    assert [p["containerPort"] for p in web["ports"]] == [port]
    for probe, view in (("livenessProbe", health.live), ("readinessProbe", health.ready)):
        request = web[probe]["httpGet"]
        assert resolve(request["path"]).func is view
        assert port_number(web, request["port"]) == port
        # Without a Host header the kubelet sends the pod's address, and ALLOWED_HOSTS answers 400.
        headers = {header["name"].lower(): header["value"] for header in request.get("httpHeaders", [])}
        assert "host" in headers, f"{probe} sends no Host header"
        assert validate_host(split_domain_port(headers["host"])[0], allowed_hosts(objects))
    service = one(objects, "Service", "chat-web")
    assert service["spec"]["selector"].items() <= pod_labels(workloads(objects)["web"]).items()
    assert [port_number(web, p["targetPort"]) for p in service["spec"]["ports"]] == [port]


def test_a_stopping_web_pod_drains_before_it_is_killed_and_a_rolling_update_keeps_every_pod(objects):
    workload = workloads(objects)["web"]
    spec = pod_spec(workload)
    web = main_container(workload)
    pre_stop = web["lifecycle"]["preStop"]["sleep"]["seconds"]
    # SIGTERM comes after the preStop wait; the pod then drains for WEB_DRAIN_SECONDS (answers.drain).
    assert spec["terminationGracePeriodSeconds"] >= pre_stop + setting(objects, "WEB_DRAIN_SECONDS") + 5
    assert pre_stop >= 2  # long enough for the endpoints to drop the pod before it stops listening
    rolling = workload["spec"]["strategy"]["rollingUpdate"]
    assert (rolling["maxUnavailable"], rolling["maxSurge"]) == (0, 1)
    # supervisord waits as long for it under `make run`.
    assert STOP_WAIT["web"] >= settings.WEB_DRAIN_SECONDS + 5


def test_the_engine_pod_is_restarted_only_when_its_server_stays_down_longer_than_a_restart(objects):
    engine = main_container(workloads(objects)["engine"])
    live = engine["livenessProbe"]
    assert (live["httpGet"]["path"], port_number(engine, live["httpGet"]["port"])) == (
        "/health",
        engine_port(objects),
    )
    # runinference restarts a dead server itself (EngineSupervisor): its longest wait, then a start
    # of up to INFERENCE_STARTUP_TIMEOUT. Only a server that stays down longer is a hung one.
    restart = EngineSupervisor.RESTART_DELAY_MAX + setting(objects, "INFERENCE_STARTUP_TIMEOUT")
    assert live["periodSeconds"] * live["failureThreshold"] > restart + live["periodSeconds"]


def probe_command(container: dict, probe: str) -> list[str]:
    command = container[probe]["exec"]["command"]
    assert command[:2] == ["sh", "-c"], command
    return command


# The pod's hostname, as Celery's %h reads it (socket.gethostname), from any shell.
POD_HOSTNAME = "$(cat /proc/sys/kernel/hostname)"


def test_each_celery_worker_s_probes_ping_the_node_name_its_command_gives_it(objects):
    for component in ("worker", "bulk"):
        container = main_container(workloads(objects)[component])
        line = procfile()[PROCESSES[component]]
        given = re.search(r"--hostname (\S+)", line)
        node = given.group(1) if given else "celery@%h"  # Celery's default
        ping = f"exec celery --app chatsite inspect ping --destination {node.replace('%h', POD_HOSTNAME)} "
        for probe in ("readinessProbe", "livenessProbe"):
            command = probe_command(container, probe)
            assert command[2].startswith(ping), (component, probe)
            # The probe waits for the ping's own wait for a reply.
            timeout = float(flag_values(command[2].split(), "--timeout")[0])
            assert container[probe]["timeoutSeconds"] > timeout, (component, probe)
        live = container["livenessProbe"]
        # A broker that is away for a few minutes restarts no worker.
        assert live["periodSeconds"] * live["failureThreshold"] >= 300, component


def celery_env(**extra: str) -> dict[str, str]:
    """A Celery process of the product's on the suite's Redis database, as a pod's would be."""
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DJANGO_SETTINGS_MODULE": "chatsite.settings",
        "REDIS_URL": settings.REDIS_URL,
        **extra,
    }


def probe_passes(command: list[str], env: dict[str, str], timeout: float) -> bool:
    """As the kubelet judges an exec probe: exit status 0 within its timeoutSeconds."""
    try:
        return (
            subprocess.run(command, env=env, cwd=ROOT, capture_output=True, timeout=timeout).returncode == 0
        )
    except subprocess.TimeoutExpired:
        return False


@contextmanager
def running(command: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`command` in a process group of its own, its output in `log`; stopped (woken first, should a
    test have stopped it with SIGSTOP) on the way out."""
    with open(log, "w") as output:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGCONT)
        stop_group(process, signal.SIGTERM, 30)


def test_a_worker_passes_its_probe_while_it_consumes_and_fails_it_once_its_main_process_is_stuck(
    objects, tmp_path
):
    container = main_container(workloads(objects)["worker"])
    probe = probe_command(container, "livenessProbe")
    timeout = container["livenessProbe"]["timeoutSeconds"]
    env = celery_env()
    log = tmp_path / "worker.log"
    # The pod's command, on a queue of its own: it takes none of the suite's tasks.
    command = [*container["command"][:2], container["command"][2] + " --queues k8s-probe-test"]
    with running(command, env, log) as worker:
        wait_for(lambda: " ready." in log.read_text() or worker.poll() is not None, 90, "Celery worker")
        assert worker.poll() is None, log.read_text()
        assert probe_passes(probe, env, timeout), log.read_text()
        os.kill(worker.pid, signal.SIGSTOP)  # the main process, which answers pings, not its pool
        assert not probe_passes(probe, env, timeout)


def test_beat_passes_its_probe_while_it_writes_its_schedule_and_fails_it_once_it_stops(objects, tmp_path):
    container = main_container(workloads(objects)["beat"])
    probe = probe_command(container, "livenessProbe")
    assert probe_command(container, "readinessProbe") == probe
    window = int(re.search(r"-mmin -(\d+)\b", probe[2]).group(1)) * 60
    # Beat writes its schedule every sync_every seconds, checked after each sleep, which lasts
    # until the next task is due at the latest: the shortest interval of its schedule.
    shortest = min(entry["schedule"] for entry in settings.CELERY_BEAT_SCHEDULE.values())
    assert window > Scheduler.sync_every + shortest
    env = celery_env(DATA_DIR=str(tmp_path))
    assert not probe_passes(probe, env, 10), "passes before beat wrote anything"
    log = tmp_path / "beat.log"
    with running(container["command"], env, log) as beat:
        wait_for(lambda: probe_passes(probe, env, 10) or beat.poll() is not None, 60, "beat's schedule")
        assert beat.poll() is None, log.read_text()
    # What a beat stuck for longer than the window leaves behind.
    written = [path for path in tmp_path.iterdir() if path.name.startswith("celerybeat-schedule")]
    assert written
    stale = time.time() - window - 60
    for path in written:
        os.utime(path, (stale, stale))
    assert not probe_passes(probe, env, 10)
